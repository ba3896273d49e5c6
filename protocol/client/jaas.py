"""Kafka's ``sasl.jaas.config`` syntax (Kafka's JaasConfig, after Java's StreamTokenizer).

    <LoginModuleClass> <flag> (<option>=<value>)* ;

Tokens: whitespace is any byte up to and including space; ``;`` and ``=`` stand alone; values
may be quoted with ``"`` or ``'`` (backslash escapes ``\\n \\t \\r \\b \\f``, octal, and any
other character taken as itself); a ``/`` outside quotes starts a comment to the end of the
line (``//`` too), and ``/* ... */`` is a block comment — so unquoted values cannot hold a
slash, as in Kafka. The flag is one of required, requisite, sufficient, optional (any case).
``sasl.jaas.config`` holds exactly one login module.

The broker reads its users from the options (``user_<name>="<password>"`` for PLAIN), its
own credentials for inter-broker links (``username``/``password``), and OAUTHBEARER's
``unsecured*`` options; a client reads its ``username``/``password``.
"""

from __future__ import annotations

from typing import NamedTuple

CONTROL_FLAGS = ("REQUIRED", "REQUISITE", "SUFFICIENT", "OPTIONAL")

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


class JaasError(ValueError):
    pass


class JaasEntry(NamedTuple):
    login_module: str
    control_flag: str  # upper case
    options: dict[str, str]


_WORD, _QUOTED, _SEMI, _EQUALS = "word", "quoted", ";", "="
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "a": "\a", "v": "\v"}


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if ord(c) <= 32:
            i += 1
        elif c == "/":
            if text.startswith("/*", i):
                end = text.find("*/", i + 2)
                i = n if end < 0 else end + 2
            else:  # '/' is a comment character: the rest of the line goes
                end = text.find("\n", i)
                i = n if end < 0 else end + 1
        elif c in ";=":
            out.append((c, c))
            i += 1
        elif c in "\"'":
            quote = c
            i += 1
            chars: list[str] = []
            while i < n and text[i] != quote and text[i] != "\n":
                ch = text[i]
                if ch == "\\" and i + 1 < n:
                    nxt = text[i + 1]
                    if nxt in "01234567":
                        j = i + 1
                        digits = ""
                        while j < n and len(digits) < (3 if nxt <= "3" else 2) and text[j] in "01234567":
                            digits += text[j]
                            j += 1
                        chars.append(chr(int(digits, 8)))
                        i = j
                        continue
                    chars.append(_ESCAPES.get(nxt, nxt))
                    i += 2
                    continue
                chars.append(ch)
                i += 1
            i += 1  # the closing quote (or the end of the line/text, as StreamTokenizer)
            out.append((_QUOTED, "".join(chars)))
        else:
            j = i
            while j < n and ord(text[j]) > 32 and text[j] not in ";=/\"'":
                j += 1
            out.append((_WORD, text[i:j]))
            i = j
    return out


def parse_jaas(text: str) -> list[JaasEntry]:
    """Every login module entry of a JAAS configuration string (JaasError if malformed)."""
    toks = _tokens(text)
    entries: list[JaasEntry] = []
    pos = 0
    while pos < len(toks):
        kind, module = toks[pos]
        if kind not in (_WORD, _QUOTED):
            raise JaasError(f"expected a login module class, found {module!r} in JAAS config")
        pos += 1
        if pos >= len(toks):
            raise JaasError("Login module control flag not specified in JAAS config")
        flag = toks[pos][1]
        if toks[pos][0] not in (_WORD, _QUOTED) or flag.upper() not in CONTROL_FLAGS:
            raise JaasError(f"Invalid login module control flag '{flag}' in JAAS config")
        pos += 1
        options: dict[str, str] = {}
        while pos < len(toks) and toks[pos][0] != _SEMI:
            kind, key = toks[pos]
            if kind not in (_WORD, _QUOTED):
                raise JaasError(f"expected an option name, found {key!r} in JAAS config")
            if pos + 2 >= len(toks) or toks[pos + 1][0] != _EQUALS or toks[pos + 2][0] not in (_WORD, _QUOTED):
                raise JaasError(f"Value not specified for key '{key}' in JAAS config")
            options[key] = toks[pos + 2][1]
            pos += 3
        if pos >= len(toks):
            raise JaasError("JAAS config entry not terminated by semi-colon")
        pos += 1  # ';'
        entries.append(JaasEntry(module, flag.upper(), options))
    if not entries:
        raise JaasError("Login module not specified in JAAS config")
    return entries


def parse_single_jaas(text: str) -> JaasEntry:
    """``sasl.jaas.config``: exactly one login module, as Kafka requires."""
    entries = parse_jaas(text)
    if len(entries) != 1:
        raise JaasError(f"JAAS config property contains {len(entries)} login modules, should be 1 module")
    return entries[0]
