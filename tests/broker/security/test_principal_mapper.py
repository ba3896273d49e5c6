"""ssl.principal.mapping.rules: Kafka's own SslPrincipalMapperTest cases, and the DN of a
real certificate in RFC 2253 order."""

from __future__ import annotations

import pytest

from broker.security.principal_mapper import NoMatchingRule, SslPrincipalMapper, distinguished_name


@pytest.mark.parametrize("rules", [
    "DEFAULT", "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/", "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/", "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
    "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U", "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
    "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
])
def test_valid_rules(rules):
    SslPrincipalMapper(rules)


@pytest.mark.parametrize("rules", [
    "default", "DEFAUL", "DEFAULT/L", "DEFAULT/U", "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
    "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/", "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/L", "RULE:^CN=(.*?),OU=ServiceUsers.*$/U", "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
])
def test_invalid_rules(rules):
    with pytest.raises(ValueError):
        SslPrincipalMapper(rules)


def test_mapping():
    mapper = SslPrincipalMapper(", ".join([
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT"]))
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"


@pytest.mark.parametrize("expected, rules", [
    ("[]", ""), ("[DEFAULT]", "DEFAULT"), ("[RULE:/]", "RULE://"), ("[RULE:/.*]", "RULE:/.*/"),
    ("[RULE:/.*/L]", "RULE:/.*/L"), ("[RULE:/, DEFAULT]", "RULE://,DEFAULT"), ("[RULE:/, DEFAULT]", "  RULE:// ,  DEFAULT  "),
    ("[RULE:   /     , DEFAULT]", "  RULE:   /     / ,  DEFAULT  "),
    ("[RULE:  /     /U, DEFAULT]", "  RULE:  /     /U   ,DEFAULT  "),
    ("[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]", "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  "),
    ("[]", ",   , , ,      , , ,   "), ("[RULE:/, DEFAULT]", ",,RULE://,,,DEFAULT,,"),
    ("[RULE: /   , DEFAULT]", ",  , RULE: /   /    ,,,   DEFAULT, ,   "),
    ("[RULE:   /  /U, DEFAULT]", "     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,"),
    ("[RULE:\\/\\\\\\(\\)\\n\\t/\\/\\/]", "RULE:\\/\\\\\\(\\)\\n\\t/\\/\\//"),
    ("[RULE:\\**\\/+/*/L, RULE:\\/*\\**/**]", "RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/"),
    ("[RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, /DEFAULT, DEFAULT]",
     "RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT"),
])
def test_rules_splitting(expected, rules):
    assert repr(SslPrincipalMapper(rules)) == f"SslPrincipalMapper(rules = {expected})"


def test_comma_with_whitespace():
    mapper = SslPrincipalMapper("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"


def test_back_references_past_the_groups_are_text():
    assert SslPrincipalMapper("RULE:^CN=(.*?),(.*)$/$1@$3/").name("CN=a,O=b") == "a@$3"
    assert SslPrincipalMapper("RULE:^CN=(.*?),(.*)$/$12/").name("CN=a,O=b") == "a2"
    assert SslPrincipalMapper("RULE:^CN=(.*?),(.*)$/[$0]/").name("CN=a,O=b") == "[CN=a,O=b]"


def test_no_rule_applies():
    with pytest.raises(NoMatchingRule):
        SslPrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/").name("CN=x,OU=Other")


def test_distinguished_name_of_a_certificate_is_rfc2253_most_specific_first():
    from cryptography.hazmat.primitives.serialization import Encoding

    from cli.certs import CertificateAuthority, client_subject

    ca = CertificateAuthority.create()
    _key, cert = ca.issue(client_subject("alice"))
    dn = distinguished_name(cert.public_bytes(Encoding.DER))
    assert dn == "CN=alice,OU=clients,O=kbroker"
    assert SslPrincipalMapper("RULE:^CN=([^,]+),OU=clients,.*$/$1/U").name(dn) == "ALICE"
