"""Kafka's sasl.jaas.config syntax (JaasConfig's tokenizer rules)."""

from __future__ import annotations

import pytest

from protocol.client.jaas import JaasError, parse_jaas, parse_single_jaas

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


def test_options_quoted_and_bare():
    entry = parse_single_jaas(f'{PLAIN} required username="admin" password=\'s e;c=r/et\' user_alice=alice-secret;')
    assert entry.login_module == PLAIN and entry.control_flag == "REQUIRED"
    assert entry.options == {"username": "admin", "password": "s e;c=r/et", "user_alice": "alice-secret"}


def test_escapes_newlines_and_comments():
    text = f'''
      {PLAIN} Required   // a comment to the end of the line
        /* a block
           comment */ username="a\\"b\\\\c\\tT" password="\\101x";
    '''
    entry = parse_single_jaas(text)
    assert entry.control_flag == "REQUIRED"
    assert entry.options == {"username": 'a"b\\c\tT', "password": "Ax"}


def test_unquoted_slash_starts_a_comment():
    with pytest.raises(JaasError, match="Value not specified"):
        parse_single_jaas(f"{PLAIN} required path=/etc/x;")


@pytest.mark.parametrize("text, message", [
    ("", "Login module not specified"),
    (PLAIN, "control flag not specified"),
    (f"{PLAIN} mandatory;", "Invalid login module control flag 'mandatory'"),
    (f'{PLAIN} required username="a"', "not terminated by semi-colon"),
    (f"{PLAIN} required username;", "Value not specified for key 'username'"),
    (f"{PLAIN} required username=;", "Value not specified for key 'username'"),
])
def test_malformed(text, message):
    with pytest.raises(JaasError, match=message):
        parse_jaas(text)


def test_sasl_jaas_config_holds_one_module():
    assert len(parse_jaas(f"{PLAIN} required; {PLAIN} optional a=b;")) == 2
    with pytest.raises(JaasError, match="contains 2 login modules, should be 1"):
        parse_single_jaas(f"{PLAIN} required; {PLAIN} optional a=b;")
