"""Kafka's ``ssl.principal.mapping.rules`` (SslPrincipalMapper, KIP-371): a client
certificate's distinguished name to a principal name.

Rules are separated by commas: ``DEFAULT`` (the DN as it is) or
``RULE:<regex>/<replacement>/[L|U]`` (the regex must match the whole DN; the replacement may
use ``$1``..``$n``, a back reference past the number of groups being literal text; ``L``/``U``
lower- or upper-case the result). The first rule that applies wins; none applying is an
error, and the connection fails to authenticate. The DN is in RFC 2253 form, most specific
RDN first, as Java's ``X500Principal.getName()`` gives it: ``CN=alice,OU=eng,O=acme,C=US``.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_RULE_PATTERN = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE_PATTERN + r")\s*(?:,\s*|$)")
_RULE_PARSER = re.compile(_RULE_PATTERN)
_BACK_REFERENCE = re.compile(r"\$(\d+)")


class NoMatchingRule(ValueError):
    pass


class _Rule(NamedTuple):
    default: bool
    pattern: re.Pattern[str] | None
    replacement: str
    lower: bool
    upper: bool

    def apply(self, dn: str) -> str | None:
        if self.default:
            return dn
        assert self.pattern is not None
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(_python_replacement(self.replacement, self.pattern.groups), dn)
        if self.lower:
            return result.lower()
        if self.upper:
            return result.upper()
        return result

    def __str__(self) -> str:
        if self.default:
            return "DEFAULT"
        assert self.pattern is not None
        return f"RULE:{self.pattern.pattern}/{self.replacement}" + ("/L" if self.lower else "/U" if self.upper else "")


def _python_replacement(replacement: str, groups: int) -> str:
    """Java's replacement syntax ($n, \\x) as a Python one: a reference to a group that does not
    exist is literal text (after shortening $12 to $1 while 12 is too many, as Kafka does)."""
    out: list[str] = []
    i = 0
    while i < len(replacement):
        c = replacement[i]
        if c == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1].replace("\\", "\\\\"))
            i += 2
            continue
        m = _BACK_REFERENCE.match(replacement, i)
        if c == "$" and m is not None:
            digits = m.group(1)
            if digits.startswith("0"):  # the whole match, then the other digits as text
                out.append("\\g<0>" + digits[1:])
                i = m.end()
                continue
            n = int(digits)
            while n > groups and n >= 10:
                n //= 10
            used = len(str(n))
            if n > groups:
                out.append("$" + digits)
            else:
                out.append(f"\\g<{n}>" + digits[used:])
            i = m.end()
            continue
        out.append("\\\\" if c == "\\" else c)
        i += 1
    return "".join(out)


class SslPrincipalMapper:
    def __init__(self, rules: str | None) -> None:
        self.rules = [r for r in (_parse(text) for text in _split("DEFAULT" if rules is None else rules)) if r is not None]

    def name(self, dn: str) -> str:
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        raise NoMatchingRule(f"No rules apply to {dn}, rules [{', '.join(map(str, self.rules))}]")

    def __repr__(self) -> str:
        return f"SslPrincipalMapper(rules = [{', '.join(map(str, self.rules))}])"


def _split(rules: str) -> list[str]:
    return [m.group(1) for m in _RULE_SPLITTER.finditer(rules.strip()) if m.group(0)]


def _parse(rule: str) -> _Rule | None:
    m = _RULE_PARSER.match(rule)
    if m is None:
        raise ValueError(f"Invalid rule: {rule}")
    if m.end() != len(rule):
        raise ValueError(f"Invalid rule: `{rule}`, unmatched substring: `{rule[m.end():]}`")
    if m.group(1) is not None:
        return _Rule(True, None, "", False, False)
    if m.group(2) is not None:
        try:
            pattern = re.compile(m.group(2))
        except re.error as exc:
            raise ValueError(f"Invalid rule: {rule}: {exc}") from None
        return _Rule(False, pattern, m.group(3), m.group(4) == "L", m.group(4) == "U")
    return None  # empty rules are ignored


def distinguished_name(der_certificate: bytes) -> str:
    """The subject of a DER certificate in RFC 2253 form (Java's X500Principal.getName())."""
    from cryptography import x509

    return x509.load_der_x509_certificate(der_certificate).subject.rfc4514_string()
