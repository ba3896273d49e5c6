"""Request header (v1, v2) and response header (v0, v1): the construct definitions.

The broker parses and writes headers with the hand-written codecs in ``protocol/fast_codecs.py``
(``parse_request_header``, ``encode_request_header``, ``response_header``); these schemas are
their specification and test oracle. Not API messages, so they are not in ``APIS``.

The client id keeps its int16 length even in flexible (v2) headers (``flexible="none"``):
a broker must read the header of any ApiVersions request, whatever its version.
"""

from ..schema import Field as F, Message

REQUEST_HEADER = Message("RequestHeader", None, "1-2", "2+", [
    F("request_api_key", "int16"),
    F("request_api_version", "int16"),
    F("correlation_id", "int32"),
    F("client_id", "string", "1+", nullable="1+", flexible="none"),
])

RESPONSE_HEADER = Message("ResponseHeader", None, "0-1", "1+", [
    F("correlation_id", "int32"),
])
