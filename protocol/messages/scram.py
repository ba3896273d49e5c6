"""SCRAM credentials (KIP-554): DescribeUserScramCredentials (50) and
AlterUserScramCredentials (51), v0. Mechanisms are Kafka's ScramMechanism types: 1
SCRAM-SHA-256, 2 SCRAM-SHA-512. The client sends a salt and the salted password
(Hi(password, salt, iterations)); the password itself never travels."""

from ..schema import Field as F, Message

DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST = Message("DescribeUserScramCredentialsRequest", 50, "0", "0+", [
    F("users", "[]UserName", nullable="0+", fields=[
        F("name", "string"),
    ]),
])

DESCRIBE_USER_SCRAM_CREDENTIALS_RESPONSE = Message("DescribeUserScramCredentialsResponse", 50, "0", "0+", [
    F("throttle_time_ms", "int32"),
    F("error_code", "int16"),
    F("error_message", "string", nullable="0+"),
    F("results", "[]DescribeUserScramCredentialsResult", fields=[
        F("user", "string"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("credential_infos", "[]CredentialInfo", fields=[
            F("mechanism", "int8"),
            F("iterations", "int32"),
        ]),
    ]),
])

ALTER_USER_SCRAM_CREDENTIALS_REQUEST = Message("AlterUserScramCredentialsRequest", 51, "0", "0+", [
    F("deletions", "[]ScramCredentialDeletion", fields=[
        F("name", "string"),
        F("mechanism", "int8"),
    ]),
    F("upsertions", "[]ScramCredentialUpsertion", fields=[
        F("name", "string"),
        F("mechanism", "int8"),
        F("iterations", "int32"),
        F("salt", "bytes"),
        F("salted_password", "bytes"),
    ]),
])

ALTER_USER_SCRAM_CREDENTIALS_RESPONSE = Message("AlterUserScramCredentialsResponse", 51, "0", "0+", [
    F("throttle_time_ms", "int32"),
    F("results", "[]AlterUserScramCredentialsResult", fields=[
        F("user", "string"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
    ]),
])
