"""Security: who a connection is (authentication) and what it may do (authorization).

* ``principal``: ``KafkaPrincipal`` (``User:alice``), what every request carries on its
  ``RequestContext``; ``User:ANONYMOUS`` on a PLAINTEXT listener, as in Kafka.
* ``listeners``: each listener's security settings (protocol, ``listener.name.<l>.`` keys);
  ``links``: a listener started with them, and this process's outgoing links' networks.
* ``sasl_server``: a connection's SASL state machine (Kafka's SaslServerAuthenticator), with
  one authenticator per mechanism: ``plain``, ``scram``, ``oauthbearer`` (+ ``oauthbearer_jwks``).
* ``credentials``: SCRAM credentials (RFC 5802) and the broker's cache of them, filled from
  the controller's UserScramCredentialRecords; ``bootstrap``: those written before the first
  start (``kbroker storage format --add-scram``, KIP-900).
* ``principal_mapper``: ``ssl.principal.mapping.rules``; the TLS context factory is the
  client package's (protocol/client/tls.py), shared with the outgoing links.
* ``authorizer``: the StandardAuthorizer and its ACL cache; ``request_checks``: what each API
  checks; ``metadata``: ACLs and credentials replayed from the controller's records;
  ``reconfigure``: key stores reloaded live (KIP-226).
"""
