"""Kafka's KafkaPrincipal: a type and a name, written ``User:alice``.

Every connection has one, set when it authenticates (SASL, or a TLS client certificate
mapped by ``ssl.principal.mapping.rules``); before that, and on PLAINTEXT listeners, it is
``User:ANONYMOUS``, as Kafka's DefaultKafkaPrincipalBuilder makes it.
"""

from __future__ import annotations

from typing import NamedTuple

USER_TYPE = "User"


class KafkaPrincipal(NamedTuple):
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> "KafkaPrincipal":
        """``User:alice`` -> KafkaPrincipal("User", "alice"); the name may hold colons."""
        kind, sep, name = text.partition(":")
        if not sep or not kind:
            raise ValueError(f"expected <type>:<name>, got {text!r}")
        return cls(kind, name)

    @classmethod
    def user(cls, name: str) -> "KafkaPrincipal":
        return cls(USER_TYPE, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
