"""Security: who a connection is (authentication) and what it may do (authorization).

* ``principal``: ``KafkaPrincipal`` (``User:alice``), what every request carries on its
  ``RequestContext``; ``User:ANONYMOUS`` on a PLAINTEXT listener, as in Kafka.
* ``credentials``: SCRAM credentials (RFC 5802) and the broker's cache of them, filled from
  the controller's UserScramCredentialRecords.

The TLS context factory, one authenticator per SASL mechanism and the authorizer with its
ACL cache live beside them (issue 25).
"""
