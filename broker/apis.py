"""KafkaApis: dispatch by API key, decode, call ReplicaManager / the controller side, encode.

Its collaborators are handed to it: the ReplicaManager (produce, fetch, offsets, the control
plane's LeaderAndIsr / StopReplica), the metadata cache (Metadata, UpdateMetadata), a
``TopicAdmin`` (CreateTopics, DeleteTopics, auto-creation: the controller's business), a
``Forwarding`` (CreatePartitions, IncrementalAlterConfigs, AlterConfigs, ElectLeaders: relayed
to the active controller), the ``ConfigRepository`` (DescribeConfigs), the producer id
generator (InitProducerId), the name of the listener other brokers connect to and this
broker's epoch (control requests for an older registration are refused).

Produce and Fetch, the busiest APIs, and the controller's LeaderAndIsr and UpdateMetadata (a full
state holds every partition of the cluster) use the hand-written codecs of protocol/fast_codecs.py;
every other API is decoded and encoded with its construct schema (protocol/messages). A handler
answers through ``ctx.send_response`` now or later (delayed operations), or
``send_no_response`` (acks=0). An error for one partition goes into that partition's slot; a body that does not
decode closes the connection with one log line (there is no response to put an error in).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import re
from typing import TYPE_CHECKING, Any, Callable

from protocol.api_keys import ApiKey
from protocol.errors import CorruptRecordError, ErrorCode, KafkaError, RemoteProtocolError
from protocol.fast_codecs import (FetchPartition, FetchPartitionData, FetchRequest, LeaderAndIsrPartitionError,
                                  LeaderAndIsrResponse, LeaderAndIsrTopicError, decode_fetch_c, encode_fetch_c,
                                  decode_fetch_request, decode_leader_and_isr_request, decode_produce_request,
                                  decode_update_metadata_request, encode_fetch_response,
                                  encode_leader_and_isr_response, encode_produce_response, response_header)
from protocol.messages import APIS, response_is_flexible
from protocol.records import (first_batch_is_transactional, first_batch_size, next_batch_size, produce_records_error,
                              read_header)
from protocol.schema import Api, SchemaError

from . import heap
from .security.authorizer import (CLUSTER_NAME, ERROR_MESSAGES, AclBindingFilter, Operation, ResourceType,
                                  StandardAuthorizer, supported_operations_bits)
from .security.metadata import SecurityMetadata, describe_acls_resources, describe_scram_credentials
from .coordinator.adapter import error_response
from .error_response import error_response_body
from .fetch_params import FetchParams
from .fetch_session import FetchManager, FetchSessionCache
from .client_quota_manager import NANOS_TO_PERCENT
from .forwarding import FORWARDED_APIS, NoControllerForwarding, error_response as forwarding_error_response
from .metadata_cache import BrokerEndpoint, BrokerInfo, PartitionInfo
from .metrics import count_errors, count_row_errors
from .partition import LeaderAndIsrState, VerifyingProduce, error_name, partition_names
from .replica_manager import is_internal_topic
from .security import request_checks
from .security.credentials import CredentialCache
from .security.sasl_server import answer_sasl_outside_authentication

from .topic_admin import NewTopic

if TYPE_CHECKING:
    from .config_repository import ConfigRepository
    from .coordinator import GroupCoordinatorAdapter
    from .coordinator.offsets_topic import OffsetsTopic
    from .forwarding import Forwarding
    from .metrics import RequestMetrics
    from .metadata_cache import MetadataCache
    from .network import RequestContext
    from .producer_ids import ProducerIdGenerator
    from .replica_manager import ReplicaManager
    from .topic_admin import TopicAdmin, TopicResult

log = logging.getLogger("kbroker.apis")

# Test-only switch (sim/bugs.py; never set otherwise): a control request sent to an earlier
# registration of this broker is applied (neither held until the broker knows its epoch nor
# refused). Read only at startup and when a request is stale.
BUG_STALE_BROKER_EPOCH_ACCEPTED = False

# A LeaderAndIsr of more partitions is applied in slices of this many, the loop turning between.
LEADER_AND_ISR_SLICE = 50
# What a broker serves before it is live (KafkaApis.hold_until_live): the controller's requests,
# which make it live, and ApiVersions, which every client sends first.
SERVED_BEFORE_LIVE = frozenset({ApiKey.LEADER_AND_ISR, ApiKey.UPDATE_METADATA, ApiKey.STOP_REPLICA,
                                ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})

_NOTHING: frozenset[str] = frozenset()
_WRITE, _TOPIC = int(Operation.WRITE), int(ResourceType.TOPIC)  # the produce path's check, without enum lookups
CONTROLLER_REQUESTS = frozenset({ApiKey.LEADER_AND_ISR, ApiKey.UPDATE_METADATA, ApiKey.STOP_REPLICA})
# Not counted against request_percentage quotas (Kafka's exempt APIs: cluster actions, ApiVersions, SASL)
QUOTA_EXEMPT = CONTROLLER_REQUESTS | {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
REQUEST_TYPE_FULL = 2  # UpdateMetadata's and LeaderAndIsr's type (KIP-516): the whole state, replacing what the broker knew

_SOFTWARE_NAME = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def _in_request_order(request_topics, results: list, denied: list[str],
                      invalid: dict[tuple[str, int], tuple[int, str]]) -> list:
    """Produce results for every partition of the request, in its order: those appended
    (``results``), those of ``denied`` topics, those refused before the log (``invalid``)."""
    appended = {(t, r[0]): r for t, rs in results for r in rs}
    out = []
    for t, parts in request_topics:
        rows = []
        for p, _records in parts:
            if t in denied:
                rows.append([p, ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1, -1, -1])
            elif (t, p) in invalid:
                code, message = invalid[(t, p)]
                rows.append([p, code, -1, -1, -1, [], message])
            else:
                rows.append(appended[(t, p)])
        out.append((t, rows))
    return out


_NOT_DENIED: frozenset[str] = frozenset()  # a Fetch's denied topics without an authorizer


def _fetch_in_request_order(request_topics, results: list, denied: set[str] | frozenset[str]) -> list:
    """Fetch results for every topic of the request, in its order: those read, and
    TOPIC_AUTHORIZATION_FAILED for every partition of the ``denied`` topics."""
    read = iter(results)  # one entry per topic fetched, in the request's order
    out = []
    for t, parts in request_topics:
        if t in denied:
            # empty records, never null (Kafka's MemoryRecords.EMPTY): librdkafka rejects the whole
            # response for a -1 MessageSetSize and never sees the error
            out.append((t, [FetchPartitionData(fp.partition, ErrorCode.TOPIC_AUTHORIZATION_FAILED, records=b"")
                            for fp in parts]))
        else:
            out.append(next(read))
    return out


def _merged_by_topic(topics: list, allowed: set[str], respond: Callable[[dict], None], field: str,
                     refused_partitions: Callable[..., list]) -> Callable[[dict], None]:
    """A group API's ``respond`` that puts the topics the principal was refused back into the
    answer (``refused_partitions(topic)``: their partition entries), in the request's order.
    An answer without topics (a group-level error) goes as it is."""
    def merged(body: dict) -> None:
        answered = body.get(field)
        if not answered and body.get("error_code"):
            return respond(body)
        got: dict[str, list] = {}
        for t in answered or ():
            got.setdefault(t["name"], []).extend(t["partitions"])
        out: list[dict] = []
        for t in topics:
            if t.name not in allowed:
                out.append({"name": t.name, "partitions": refused_partitions(t)})
            elif t.name in got:
                out.append({"name": t.name, "partitions": got.pop(t.name)})
        body[field] = out
        respond(body)
    return merged


def frame_response(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    header = response_header(correlation_id, response_is_flexible(api_key, version))
    size = len(header) + len(body)
    return size.to_bytes(4, "big", signed=True) + header + body


class _Handlers(dict):
    """KafkaApis.handlers: a dict that tells its KafkaApis of every change (``changed``), so
    that handle's table of Produce and Fetch handlers (KafkaApis._served) follows a handler
    replaced, added or removed; reading it is a dict's read. (Replacing ``handlers`` itself
    would not be seen: change its entries.)"""

    __slots__ = ("changed",)

    def __init__(self, changed: Callable[[], None], *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.changed = changed

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        self.changed()

    def __delitem__(self, key) -> None:
        super().__delitem__(key)
        self.changed()

    def update(self, *args, **kwargs) -> None:
        super().update(*args, **kwargs)
        self.changed()

    def pop(self, *args):
        try:
            return super().pop(*args)
        finally:
            self.changed()

    def popitem(self):
        try:
            return super().popitem()
        finally:
            self.changed()

    def setdefault(self, key, default=None):
        try:
            return super().setdefault(key, default)
        finally:
            self.changed()

    def clear(self) -> None:
        super().clear()
        self.changed()

    def __ior__(self, other):
        super().__ior__(other)
        self.changed()
        return self


def _record_leader_quota(leader_quota, results: list) -> None:
    """KIP-73: what throttled partitions send to followers counts against the leader quota (a
    follower's Fetch answer while the leader quota throttles something)."""
    leader_quota.record(sum(len(pd.records) for topic, parts in results for pd in parts
                            if pd.records and leader_quota.is_throttled(topic, pd.partition)))


class KafkaApis:
    def __init__(self, *, replica_manager: "ReplicaManager", metadata_cache: "MetadataCache", topic_admin: "TopicAdmin",
                 config_repository: "ConfigRepository", producer_ids: "ProducerIdGenerator",
                 inter_broker_listener: str, forwarding: "Forwarding | None" = None,
                 broker_epoch: Callable[[], int] = lambda: -1,
                 group_coordinator: "GroupCoordinatorAdapter | None" = None,
                 offsets_topic: "OffsetsTopic | None" = None, request_metrics: "RequestMetrics | None" = None,
                 authorizer: StandardAuthorizer | None = None, credential_cache: "CredentialCache | None" = None,
                 fetch_session_cache_slots: int = 1000) -> None:
        self.replica_manager = replica_manager
        # KIP-227 incremental fetch sessions (max.incremental.fetch.session.cache.slots)
        self.fetch_manager = FetchManager(FetchSessionCache(fetch_session_cache_slots, replica_manager.time))
        self.request_metrics = request_metrics  # error codes answered, per API (None: metrics off)
        # Produce's and Fetch's ApiStats, bound once: ``ApiKey.PRODUCE`` per request is a lookup
        # through EnumType.__getattr__ (Python 3.11) and an int-subclass list index.
        self._produce_stats = request_metrics.by_key[ApiKey.PRODUCE] if request_metrics is not None else None
        self._fetch_stats_api = request_metrics.by_key[ApiKey.FETCH] if request_metrics is not None else None
        # A follower's FetchParams by what its requests ask (the same every time): built once
        # (_handle_fetch_lean; FetchParams is never changed once made)
        self._follower_params: dict[tuple[int, int, int, int, int], FetchParams] = {}
        self.metadata_cache = metadata_cache
        self.topic_admin = topic_admin
        self.forwarding = forwarding or NoControllerForwarding()
        self.config_repository = config_repository
        self.producer_ids = producer_ids
        self.inter_broker_listener = inter_broker_listener
        self.broker_epoch = broker_epoch
        # None: no authorizer.class.name, every request allowed (Kafka's default).
        self.authorizer = authorizer
        self.credential_cache = credential_cache if credential_cache is not None else CredentialCache()
        self.listener_reconfiguration = None  # broker/security/reconfigure.py: key stores reloaded live
        # ACL bindings and SCRAM credentials, replayed from the controller's UpdateMetadata.
        self.security_metadata = SecurityMetadata(authorizer, self.credential_cache)
        self.group_coordinator = group_coordinator
        self.offsets_topic = offsets_topic
        # Client quotas (broker/client_quota_manager.py ClientQuotas), when attached: throttle
        # times for Produce, consumer Fetch and request time, and the connection muted (KIP-219).
        self.quotas: Any = None
        self._quota_exempt = False  # set by a handler for its own request (a follower's Fetch)
        self.transactions = None  # broker/transaction/handlers.py TransactionApis, when attached
        # KIP-890 verification of transactional produce (broker/transaction/verification.py), when
        # transaction.partition.verification.enable
        self.txn_verifier: Any = None
        # Controller requests (LeaderAndIsr, UpdateMetadata, StopReplica) waiting behind a
        # LeaderAndIsr being applied in slices, the one applying first (see _in_controller_order).
        self._controller_requests: collections.deque[Callable[[], None]] = collections.deque()
        # Requests held until the broker is live (see hold_until_live); None once it is.
        self._held_until_live: list["RequestContext"] | None = None
        self._held_until_registered: list["RequestContext"] | None = None
        group_handlers: dict[int, Callable[["RequestContext"], None]] = {} if group_coordinator is None else {
            ApiKey.JOIN_GROUP: self.handle_join_group_request,
            ApiKey.SYNC_GROUP: self.handle_sync_group_request,
            ApiKey.HEARTBEAT: self.handle_heartbeat_request,
            ApiKey.LEAVE_GROUP: self.handle_leave_group_request,
            ApiKey.OFFSET_COMMIT: self.handle_offset_commit_request,
            ApiKey.OFFSET_FETCH: self.handle_offset_fetch_request,
            ApiKey.LIST_GROUPS: self.handle_list_groups_request,
            ApiKey.DESCRIBE_GROUPS: self.handle_describe_groups_request,
            ApiKey.DELETE_GROUPS: self.handle_delete_groups_request,
            ApiKey.OFFSET_DELETE: self.handle_offset_delete_request,
        }
        # (a _Handlers: a change of an entry rebuilds handle's table, _handlers_changed)
        self.handlers: dict[int, Callable[["RequestContext"], None]] = _Handlers(self._handlers_changed, {
            ApiKey.PRODUCE: self.handle_produce_request,
            ApiKey.FETCH: self.handle_fetch_request,
            ApiKey.LIST_OFFSETS: self.handle_list_offsets_request,
            ApiKey.METADATA: self.handle_metadata_request,
            ApiKey.FIND_COORDINATOR: self.handle_find_coordinator_request,
            ApiKey.API_VERSIONS: self.handle_api_versions_request,
            ApiKey.CREATE_TOPICS: self.handle_create_topics_request,
            ApiKey.DELETE_TOPICS: self.handle_delete_topics_request,
            ApiKey.DESCRIBE_CONFIGS: self.handle_describe_configs_request,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self.handle_offset_for_leader_epoch_request,
            ApiKey.INIT_PRODUCER_ID: self.handle_init_producer_id_request,
            ApiKey.LEADER_AND_ISR: self.handle_leader_and_isr_request,
            ApiKey.STOP_REPLICA: self.handle_stop_replica_request,
            ApiKey.UPDATE_METADATA: self.handle_update_metadata_request,
            ApiKey.DESCRIBE_ACLS: self.handle_describe_acls_request,
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self.handle_describe_user_scram_credentials_request,
            ApiKey.DELETE_RECORDS: self.handle_delete_records_request,
            ApiKey.DESCRIBE_LOG_DIRS: self.handle_describe_log_dirs_request,
            ApiKey.DESCRIBE_CLUSTER: self.handle_describe_cluster_request,
            # On a SASL listener they never get here (broker/security/sasl_server.py); elsewhere: ILLEGAL_SASL_STATE.
            ApiKey.SASL_HANDSHAKE: answer_sasl_outside_authentication,
            ApiKey.SASL_AUTHENTICATE: answer_sasl_outside_authentication,
            **{key: self.handle_forwarded_request for key in FORWARDED_APIS},
            **group_handlers,
        })
        # The advertised table is derived from what is both defined in protocol/ and handled here.
        self.api_versions = sorted((key, *APIS[key].advertise) for key in self.handlers if key in APIS)
        # handle's lean case: (api key, version) -> handler for Produce and Fetch at the versions
        # served, once the broker is live (empty while it holds requests). Every request of the
        # replication path (issue 29) is one of these; the rest go the general way (_handle).
        self._served = self._hot_handlers()

    lean = True  # handle's table and the follower's Fetch (False: the general path, tests/broker/test_apis_lean.py)

    def _hot_handlers(self) -> dict[tuple[int, int], Callable[["RequestContext"], None]]:
        """handle's table, from ``handlers`` as it is now: Produce's handler, Fetch's (its lean
        one while it is handle_fetch_request); rebuilt at each change of ``handlers``."""
        if not self.lean:
            return {}
        handlers = self.handlers
        hot = {}
        if ApiKey.PRODUCE in handlers:
            hot[ApiKey.PRODUCE] = handlers[ApiKey.PRODUCE]
        if ApiKey.FETCH in handlers:
            fetch = handlers[ApiKey.FETCH]
            # (a bound method is made at each read: == compares its function and object)
            hot[ApiKey.FETCH] = self._handle_fetch_lean if fetch == self.handle_fetch_request else fetch
        return {(key, version): handler for key, handler in hot.items()
                for version in range(APIS[key].min_version, APIS[key].max_version + 1)}

    def _handlers_changed(self) -> None:
        """An entry of ``handlers`` changed: handle's table follows (empty while held)."""
        if self._held_until_live is None:
            self._served = self._hot_handlers()

    # -- dispatch --------------------------------------------------------------------------
    def hold_until_live(self) -> None:
        """Hold every request but the controller's (and ApiVersions) until ``live()``: a broker
        with a controller opens its listeners before it registers (they must be bound to be
        advertised, and the controller's LeaderAndIsr/UpdateMetadata come in through them), but
        like Kafka's broker, which enables request processing only once the controller has
        unfenced it, it serves clients only when the cluster knows it. Otherwise a client
        connecting at once (a CreateTopics right after start) would meet a controller that
        knows no live broker. Held requests keep their places: responses still go out in
        request order on each connection."""
        if self._held_until_live is None:
            self._held_until_live = []
            self._served = {}  # every request through _handle, which holds them

    def live(self) -> None:
        """Serve the held requests, in the order they came, and everything from now on."""
        held, self._held_until_live = self._held_until_live, None
        self._served = self._hot_handlers()
        for ctx in held or ():
            if not ctx.connection.closed:
                self.handle(ctx)

    def hold_until_registered(self) -> None:
        """Hold the controller's requests (LeaderAndIsr, UpdateMetadata, StopReplica) until
        ``registered()``: before its registration is answered, a broker does not know its broker
        epoch, so it cannot tell a request sent to an earlier incarnation of itself (a controller
        that has not seen the restart yet: its full state for the old registration) from one sent
        to this one; applied, the former would make a broker that lost its log lead again at an
        old leader epoch (the simulator's seed 24). Kafka's broker knows its epoch before it
        serves any request. Held, each is checked (STALE_BROKER_EPOCH) once the epoch is known."""
        if self._held_until_registered is None and not BUG_STALE_BROKER_EPOCH_ACCEPTED:
            self._held_until_registered = []

    def registered(self) -> None:
        """The broker epoch is known: the held controller requests are handled, in order."""
        held, self._held_until_registered = self._held_until_registered, None
        for ctx in held or ():
            if not ctx.connection.closed:
                self.handle(ctx)

    def handle(self, ctx: "RequestContext") -> None:
        header = ctx.header
        # Produce and Fetch at a version served, live, without request quotas: _handle's checks
        # all pass; the handler is called as there (issue 29: every request of the replication path)
        handler = self._served.get((header.api_key, header.api_version))
        if handler is not None:
            quotas = self.quotas
            if quotas is None or not quotas.quotas:
                try:
                    handler(ctx)
                except RemoteProtocolError:
                    raise
                except Exception as exc:
                    self._handler_failed(ctx, APIS[header.api_key], exc)
                return
        self._handle(ctx)

    def _handler_failed(self, ctx: "RequestContext", api: Api, exc: Exception) -> None:
        """What _handle does with a handler's exception (but RemoteProtocolError, which closes);
        called in the ``except`` (log.exception logs the exception being handled)."""
        header = ctx.header
        if isinstance(exc, KafkaError):
            log.warning("%s v%d from %s failed: %s %s", api.name, header.api_version, ctx.peer,
                        exc.error_code.name, exc)
            self._answer_error(ctx, api, exc.error_code, str(exc) or None)
            return
        # Kafka's handleError: answer the request with UNKNOWN_SERVER_ERROR, keep the connection.
        log.exception("unexpected error handling %s v%d (correlation id %d) from %s; answering "
                      "UNKNOWN_SERVER_ERROR", api.name, header.api_version, header.correlation_id, ctx.peer)
        self._answer_error(ctx, api, ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}")

    def _handle(self, ctx: "RequestContext") -> None:
        """handle's general path (the reference of its lean one)."""
        header = ctx.header
        key = header.api_key  # (read once: every request)
        if self._held_until_live is not None and key not in SERVED_BEFORE_LIVE:
            self._held_until_live.append(ctx)
            return
        if self._held_until_registered is not None and key in CONTROLLER_REQUESTS:
            self._held_until_registered.append(ctx)
            return
        handler = self.handlers.get(key)
        if handler is None:
            raise RemoteProtocolError(f"unknown api key {key}")
        api = APIS[key]
        version = header.api_version
        if not api.min_version <= version <= api.max_version and key != ApiKey.API_VERSIONS:  # api.supports
            if key == ApiKey.PRODUCE and 0 <= version < 3:
                return self._reject_old_produce(ctx)
            raise RemoteProtocolError(f"unsupported version {version} of {api.name} "
                                      f"(supported {api.min_version}-{api.max_version})")
        quotas = self.quotas
        if quotas is not None and quotas.quotas and key not in QUOTA_EXEMPT:
            return self._handle_with_request_quota(ctx, handler, api, quotas)
        try:
            handler(ctx)
        except RemoteProtocolError:
            raise
        except KafkaError as exc:
            log.warning("%s v%d from %s failed: %s %s", api.name, header.api_version, ctx.peer,
                        exc.error_code.name, exc)
            self._answer_error(ctx, api, exc.error_code, str(exc) or None)
        except Exception as exc:
            # Kafka's handleError: answer the request with UNKNOWN_SERVER_ERROR, keep the connection.
            log.exception("unexpected error handling %s v%d (correlation id %d) from %s; answering "
                          "UNKNOWN_SERVER_ERROR", api.name, header.api_version, header.correlation_id, ctx.peer)
            self._answer_error(ctx, api, ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}")

    def _handle_with_request_quota(self, ctx: "RequestContext", handler, api: Api, quotas) -> None:
        """``handle`` with a quota configured: the handler's time is recorded against the
        client's request_percentage quota (Kafka's ClientRequestQuotaManager: the request
        thread's time, as a percentage of one thread), and a throttle it earns mutes the
        connection. Exempt: the controller's requests, ApiVersions, SASL, followers' Fetch."""
        time = quotas.time
        t0 = time.nanoseconds()
        self._quota_exempt = False
        try:
            handler(ctx)
        except RemoteProtocolError:
            raise
        except KafkaError as exc:
            log.warning("%s v%d from %s failed: %s %s", api.name, ctx.header.api_version, ctx.peer,
                        exc.error_code.name, exc)
            self._answer_error(ctx, api, exc.error_code, str(exc) or None)
        except Exception as exc:
            log.exception("unexpected error handling %s v%d (correlation id %d) from %s; answering "
                          "UNKNOWN_SERVER_ERROR", api.name, ctx.header.api_version, ctx.header.correlation_id,
                          ctx.peer)
            self._answer_error(ctx, api, ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}")
        if self._quota_exempt:
            return
        elapsed = time.nanoseconds() - t0
        throttle = quotas.request.record_and_get_throttle_time_ms(
            ctx.principal.name, ctx.header.client_id or "", elapsed * NANOS_TO_PERCENT, quotas.now_ms())
        if throttle > 0:
            ctx.connection.throttle(throttle)

    def _request_throttle_ms(self, ctx: "RequestContext") -> int:
        """The throttle time the client's request_percentage quota stands at (what was recorded
        up to its previous request), for the response's throttle_time_ms."""
        quotas = self.quotas
        return quotas.request.throttle_time_now_ms(ctx.principal.name, ctx.header.client_id or "", quotas.now_ms())

    def _answer_error(self, ctx: "RequestContext", api: Api, code: int, message: str | None) -> None:
        """Answer the whole request with ``code`` (Kafka's getErrorResponse), unless a response
        already went out; a request that cannot be parsed closes the connection instead."""
        if ctx.answered:
            return
        request = self.parse(ctx, api)
        try:
            body = error_response(api.key, request, ctx.api_version, code)  # the group APIs' own
        except ValueError:
            body = error_response_body(api, ctx.api_version, request, code, message)
        self.send(ctx, api, body)

    def authorize(self, ctx: "RequestContext", operation: int, resource_type: int, name: str,
                  log_if_denied: bool = True) -> bool:
        """Kafka's AuthHelper.authorize: allowed when no authorizer is configured."""
        authorizer = self.authorizer
        return authorizer is None or authorizer.authorize(ctx, operation, resource_type, name, log_if_denied)

    def authorized_names(self, ctx: "RequestContext", operation: int, resource_type: int, names,
                         log_if_denied: bool = True) -> set[str]:
        """Kafka's filterByAuthorized: the names (each checked once) the principal may act on."""
        return {n for n in set(names) if self.authorize(ctx, operation, resource_type, n, log_if_denied)}

    def authorized_operations(self, ctx: "RequestContext", resource_type: int, name: str) -> int:
        authorizer = self.authorizer
        if authorizer is None:
            return supported_operations_bits(resource_type)
        return authorizer.authorized_operations(ctx, resource_type, name)

    def parse(self, ctx: "RequestContext", api: Api):
        try:
            return api.request.parse(ctx.api_version, ctx.frame, ctx.body_offset)
        except SchemaError as exc:
            raise RemoteProtocolError(f"malformed body: {exc}") from None

    def send(self, ctx: "RequestContext", api: Api, body: dict) -> None:
        version = ctx.api_version
        if self.request_metrics is not None:
            count_errors(body, self.request_metrics.by_key[api.key])
        ctx.send_response(frame_response(api.key, version, ctx.header.correlation_id, api.response.build(version, body)))

    # -- Produce ---------------------------------------------------------------------------
    def handle_produce_request(self, ctx: "RequestContext") -> None:
        header = ctx.header  # ctx.api_version and ctx.body_offset, without the property calls
        frame = ctx.frame
        request = decode_produce_request(header.api_version, memoryview(frame), header.size)
        metrics = self._produce_stats  # None: metrics off
        if request.plain and self.authorizer is None:
            # Every partition one whole plain batch (not transactional) and no ACLs: the checks
            # below would pass the request as it is, so it goes to the log at once.
            op = self.replica_manager.append_records(
                request.timeout_ms, request.acks, False, request.topics, functools.partial(
                    self._produce_respond, ctx, request, _NOTHING, {}, metrics, len(frame) + 4))
            if op is not None:
                ctx.on_cancel(op.cancel)
            return
        version = header.api_version
        acks = request.acks
        topics = request.topics
        txn_id = request.transactional_id
        request_size = len(ctx.frame) + 4
        # Kafka's KafkaApis.handleProduceRequest, in its order. RequestUtils.hasTransactionalRecords
        # reads each partition's first batch header until one is transactional: a corrupt header
        # there (batchLength under 14, magic outside 0..2) fails the whole request.
        # Each partition's first batch is sized once here (first_batch_size) and the size reused
        # below; after a transactional one Kafka's check stops reading (False: not read yet).
        firsts: list[int | None | bool] = []
        transactional = False
        plain = request.plain  # every partition one whole plain batch: the checks below pass it as it is
        try:
            for _t, parts in () if plain else topics:
                for _p, records in parts:
                    if transactional:
                        firsts.append(False)
                    else:
                        size, transactional = first_batch_size(records)
                        firsts.append(size)
        except CorruptRecordError as exc:
            log.warning("produce v%d from %s rejected: CORRUPT_MESSAGE %s", version, ctx.peer, exc)
            return self._refuse_produce(ctx, request, ErrorCode.CORRUPT_MESSAGE, metrics, str(exc))
        if transactional:
            # WRITE on the transactional id, checked only when the request holds transactional
            # records (as Kafka); transactional records without a transactional id: the same error.
            if txn_id is None or not self.authorize(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
                if txn_id is None:
                    log.warning("produce v%d from %s with transactional batches but no transactional id rejected: "
                                "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", version, ctx.peer)
                return self._refuse_produce(ctx, request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, metrics)
        # Then per partition: an unauthorized topic, an unknown partition (the replica manager
        # answers it), else ProduceRequest.validateRecords; what passes goes on to the log cut to
        # its one whole batch (a tail that is no batch is dropped: Kafka's trimInvalidBytes).
        denied: frozenset[str] | set[str] = _NOTHING
        authorizer = self.authorizer
        if authorizer is not None:
            # The one per-request check of the hot path: a topic this connection was allowed to
            # write under the current bindings is one lookup (a str key) and no call.
            allowed, generation = ctx.connection.topic_writes, authorizer.generation
            for t, _ in topics:
                if allowed.get(t) != generation:
                    if authorizer.authorize(ctx, _WRITE, _TOPIC, t):
                        if len(allowed) >= 1024:  # bounded: a client writing to ever new topics
                            allowed.clear()
                        allowed[t] = generation
                    else:
                        denied = {t} | denied
        invalid: dict[tuple[str, int], tuple[int, str]] = {}
        trimmed = False
        checked = []
        i = -1
        contains_partition = self.metadata_cache.contains_partition
        if plain and denied:  # each partition of the others as it is
            checked = [(t, parts) for t, parts in topics if t not in denied]
        for t, parts in () if plain else topics:
            if t in denied:
                i += len(parts)
                continue
            kept = []
            for p, records in parts:
                i += 1
                if contains_partition(t, p):
                    size = firsts[i]
                    problem = produce_records_error(version, records, size)
                    if problem is not None:
                        if not invalid:  # one line per request
                            log.warning("produce v%d from %s to %s-%d rejected: %s %s", version, ctx.peer, t, p,
                                        problem[0].name, problem[1])
                        invalid[(t, p)] = (problem[0], f"{t}-{p}: {problem[1]}")
                        continue
                    if size is False:
                        size = next_batch_size(records, 0, len(records))
                    if size is not None and size < len(records):
                        records, trimmed = records[:size], True
                kept.append((p, records))
            checked.append((t, kept))
        if denied or invalid or trimmed:
            topics = checked

        # A partial of a method, not a closure: the locals above stay fast locals (a closure
        # would make each captured one a cell, read through on every use).
        respond = functools.partial(self._produce_respond, ctx, request, denied, invalid, metrics, request_size)

        if transactional and self.txn_verifier is not None:
            to_verify = self._to_verify(topics)
            if to_verify:
                return self._verify_then_append(ctx, request, txn_id, topics, to_verify, invalid, respond)
        op = self.replica_manager.append_records(request.timeout_ms, acks, False, topics, respond)
        if op is not None:
            ctx.on_cancel(op.cancel)

    def _produce_respond(self, ctx: "RequestContext", request, denied, invalid: dict, metrics, request_size: int,
                         results: list) -> None:
        """Answer a Produce request with ``results`` (the replica manager's, in request order
        once denied and invalid partitions are put back), after its quotas."""
        acks = request.acks
        throttle = 0
        quotas = self.quotas
        if quotas is not None and quotas.quotas:
            # Kafka: the request's bytes against the producer_byte_rate quota, and (not for
            # acks=0) its request time; the larger throttle goes in the answer and mutes.
            throttle = quotas.produce.record_and_get_throttle_time_ms(
                ctx.principal.name, ctx.header.client_id or "", request_size, quotas.now_ms())
            if acks != 0:
                throttle = max(throttle, self._request_throttle_ms(ctx))
            if throttle > 0:
                ctx.connection.throttle(throttle)
        if denied or invalid:
            results = _in_request_order(request.topics, results, denied, invalid)
        if metrics is not None:
            count_row_errors(results, metrics.errors)
        if acks == 0:
            # Kafka closes the connection when an acks=0 produce fails, so the client notices.
            errors = [(t, r[0], r[1]) for t, rs in results for r in rs if r[1]]
            if errors:
                t, p, code = errors[0]
                ctx.close_connection(f"acks=0 produce failed for {t}-{p}: {ErrorCode(code).name}")
            else:
                ctx.send_no_response()
            return
        ctx.send_response(encode_produce_response(request.version, ctx.header.correlation_id, results, throttle))

    def _to_verify(self, topics) -> dict[tuple[str, int], tuple[Any, int, int, int]]:
        """KIP-890: the partitions (led here) where a transactional batch starts its producer's
        transaction: {(topic, partition): (Partition, producer id, epoch, base sequence)}."""
        out: dict[tuple[str, int], tuple[Any, int, int, int]] = {}
        for t, parts in topics:
            for p, records in parts:
                if records is None or not first_batch_is_transactional(records):
                    continue
                partition = self.replica_manager.get_partition(t, p)
                if partition is None or not partition.is_leader:
                    continue  # the replica manager answers it
                header = read_header(records, 0)
                if partition.needs_verification(header.producer_id, header.producer_epoch) \
                        or partition.verifying(header.producer_id):
                    out[(t, p)] = (partition, header.producer_id, header.producer_epoch, header.base_sequence)
        return out

    def _verify_then_append(self, ctx: "RequestContext", request, txn_id: str, topics, to_verify: dict,
                            invalid: dict, respond: Callable[[list], None]) -> None:
        """Ask the transaction coordinator (broker/transaction/verification.py) whether the
        partitions are in the producer's transaction; those that are not are answered with the
        error and nothing is written to them. The rest are appended as usual, after the
        requests verifying before this one on the same partitions (``VerifyingProduce``)."""
        by_producer: dict[tuple[int, int], list[tuple[str, int]]] = {}
        guards: dict[tuple[str, int], Any] = {}  # partition.VerificationGuard
        behind: dict[tuple[str, int], tuple[Any, int, int, Any]] = {}  # ... and guard of the batches waiting

        def append() -> None:
            # checked now, in arrival order: the batches before this one are appended (or refused)
            failed: dict[tuple[str, int], int] = {}
            for tp, error in entry.answers.items():
                partition, pid, epoch, sequence = to_verify[tp]
                if error == ErrorCode.NONE and not partition.verification_holds(pid, guards[tp]):
                    error = ErrorCode.INVALID_TXN_STATE  # a marker came meanwhile
                elif error == ErrorCode.NONE and partition.out_of_order_first_batch(pid, epoch, guards[tp], sequence):
                    # a lower sequence must come first (it failed its verification, retriably):
                    # retriable here too, the client resends in order (Kafka's log answers
                    # OUT_OF_ORDER_SEQUENCE_NUMBER, which librdkafka may take for a desync)
                    error = ErrorCode.NOT_ENOUGH_REPLICAS
                if error != ErrorCode.NONE:
                    failed[tp] = error
            for tp, (partition, pid, epoch, guard) in behind.items():
                # as Kafka's append checks a batch that needed no verification: its transaction
                # must still be open (a marker written meanwhile would leave it hanging)
                if not partition.verification_holds(pid, guard) or partition.needs_verification(pid, epoch):
                    failed[tp] = ErrorCode.INVALID_TXN_STATE
            for tp, code in failed.items():
                log.warning("transactional produce of %r to %s-%d refused by verification: %s", txn_id, tp[0], tp[1],
                            _error_name(code))
                invalid[tp] = (code, "Partition was not added to the transaction" if code == ErrorCode.INVALID_TXN_STATE
                               else f"Unable to verify the partition has been added to the transaction: {_error_name(code)}")
            kept = [(t, [(p, r) for p, r in parts if (t, p) not in failed]) for t, parts in topics]
            kept = [(t, parts) for t, parts in kept if parts]
            if not kept:
                return respond([])
            op = self.replica_manager.append_records(request.timeout_ms, request.acks, False, kept, respond)
            if op is not None:
                ctx.on_cancel(op.cancel)

        entry = VerifyingProduce(append)
        try:
            for tp, (partition, pid, epoch, sequence) in to_verify.items():
                by_producer.setdefault((pid, epoch), []).append(tp)
                guards[tp] = entry.join(partition, pid, sequence)
            # The request's other transactional batches (their transaction open here, nothing
            # verifying) are appended with it, later: the producer's next batches there wait too, and
            # they are checked again then (a marker may have ended the transaction meanwhile).
            for t, parts in topics:
                for p, records in parts:
                    if (t, p) in to_verify or records is None or not first_batch_is_transactional(records):
                        continue
                    partition = self.replica_manager.get_partition(t, p)
                    if partition is not None and partition.is_leader:
                        header = read_header(records, 0)
                        guard = entry.join(partition, header.producer_id)
                        behind[(t, p)] = (partition, header.producer_id, header.producer_epoch, guard)
        except BaseException:
            entry.cancel()
            raise
        ctx.on_cancel(entry.cancel)
        verified = entry.expect(len(by_producer))
        assert self.txn_verifier is not None
        try:
            for (pid, epoch), tps in by_producer.items():
                self.txn_verifier.verify(txn_id, pid, epoch, tps, verified)
        except BaseException:
            entry.cancel()  # the producer's requests behind it must not wait for its connection to close
            raise

    def _refuse_produce(self, ctx: "RequestContext", request, code: ErrorCode, metrics, message: str | None = None) -> None:
        """Kafka's handleError for a Produce: ``code`` (and ``message``, v8+) for every partition;
        with acks=0 the connection is closed instead, so the client notices."""
        extra = [[], message] if message is not None else []
        results = [(t, [[p, code, -1, -1, -1, *extra] for p, _ in parts]) for t, parts in request.topics]
        if metrics is not None:
            for _t, parts in request.topics:
                for _p in parts:
                    metrics.error(code)
        if request.acks == 0:
            ctx.close_connection(f"acks=0 produce failed: {code.name}")
        else:
            ctx.send_response(encode_produce_response(ctx.api_version, ctx.header.correlation_id, results))

    def _reject_old_produce(self, ctx: "RequestContext") -> None:
        """Produce v0-2 (message format 0/1): advertised for librdkafka's sake, never accepted."""
        api = APIS[ApiKey.PRODUCE]
        req = self.parse(ctx, api)
        if req.acks == 0:
            ctx.close_connection(f"Produce v{ctx.api_version} is not supported (message format < 2)")
            return
        self.send(ctx, api, {"responses": [
            {"name": t.name, "partition_responses": [
                {"index": p.index, "error_code": ErrorCode.UNSUPPORTED_VERSION, "base_offset": -1}
                for p in t.partition_data]} for t in req.topic_data]})

    # -- Fetch -----------------------------------------------------------------------------
    def handle_fetch_request(self, ctx: "RequestContext") -> None:
        header = ctx.header  # (its fields read directly: RequestContext's properties are calls)
        version = header.api_version
        self._handle_fetch(ctx, version, decode_fetch_request(version, memoryview(ctx.frame), header.size))

    def _handle_fetch(self, ctx: "RequestContext", version: int, request) -> None:
        """handle_fetch_request's work once the request is decoded (the reference of
        _handle_fetch_lean's follower case)."""
        correlation_id = ctx.header.correlation_id
        # KIP-227: the partitions to read are the request's, or its incremental session's
        # (broker/fetch_session.py); a session error is answered with no partitions.
        follower = request.replica_id >= 0
        context = self.fetch_manager.new_context(request, follower)
        if context.error:
            chunks, _ = encode_fetch_response(version, correlation_id, [], error_code=context.error)
            if self._fetch_stats_api is not None:
                self._fetch_stats_api.error(context.error)
            ctx.send_response(chunks)
            return
        if follower:
            self._quota_exempt = True  # a follower's fetch: replication is not a client's request time
        params = FetchParams(request.replica_id, request.max_wait_ms, request.min_bytes, request.max_bytes,
                             request.isolation_level)
        wanted = topics = context.topics
        denied: set[str] | frozenset[str] = _NOT_DENIED  # (no set built per fetch without an authorizer)
        if self.authorizer is not None:
            # Kafka: a follower needs CLUSTER_ACTION on the cluster, else every partition is
            # TOPIC_AUTHORIZATION_FAILED; a consumer needs READ on each topic.
            if follower:
                if not self.authorize(ctx, Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
                    denied = {t for t, _ in topics}
            else:
                denied = {t for t, _ in topics if not self.authorizer.authorize(ctx, Operation.READ, ResourceType.TOPIC, t)}
            if denied:
                topics = [(t, parts) for t, parts in topics if t not in denied]

        def respond(results: list) -> None:
            if denied:
                results = _fetch_in_request_order(wanted, results, denied)
            quotas = self.quotas
            if not follower and quotas is not None and quotas.quotas:
                # Kafka's consumer fetch quota: the response's bytes against consumer_byte_rate,
                # and the request time; throttled, the answer is an empty one carrying the
                # throttle time and the bytes are taken back (they were not sent).
                sent, session_id, error = context.response(results, update=False)
                chunks, size = encode_fetch_response(version, correlation_id, sent, session_id=session_id,
                                                     error_code=error)
                user, client_id, now = ctx.principal.name, ctx.header.client_id or "", quotas.now_ms()
                fetch_throttle = quotas.fetch.record_and_get_throttle_time_ms(user, client_id, size, now)
                throttle = max(fetch_throttle, self._request_throttle_ms(ctx))
                if throttle > 0:
                    quotas.fetch.unrecord(user, client_id, size, now)
                    ctx.connection.throttle(throttle)
                    session_id, error = context.throttled()
                    chunks, _ = encode_fetch_response(version, correlation_id, [], throttle_time_ms=throttle,
                                                      session_id=session_id, error_code=error)
                    return ctx.send_response(chunks)
            if follower:
                replication_quotas = self.replica_manager.replication_quotas
                if replication_quotas is not None and replication_quotas.leader.throttled:
                    _record_leader_quota(replication_quotas.leader, results)
            if topic_stats is not None:
                self._fetch_stats(results, topic_stats, follower)
            results, session_id, error = context.response(results)
            chunks, _ = encode_fetch_response(version, correlation_id, results, session_id=session_id,
                                              error_code=error)
            ctx.send_response(chunks)

        topic_stats = self.replica_manager.topic_stats
        if not topics and denied:
            return respond([])

        op = self.replica_manager.fetch_messages(params, topics, respond)
        if op is not None:
            ctx.on_cancel(op.cancel)  # the connection closes: the long-poll goes with it

    def _handle_fetch_lean(self, ctx: "RequestContext") -> None:
        """handle_fetch_request in handle's table (lean). The request decoded by the compiled
        decoder directly where it takes it (decode_fetch_request's first step), and a
        follower's fetch without an authorizer (every fetch of the replication path, issue 29)
        handled here: _handle_fetch's steps for that case, without the closure (its answer is
        ``_follower_respond``, a partial) and the consumer's and authorizer's branches. A change
        there is made here too (tests/broker/test_apis_lean.py compares them)."""
        header = ctx.header
        version = header.api_version
        request = None
        if decode_fetch_c is not None:
            request = decode_fetch_c(memoryview(ctx.frame), header.size, version, FetchRequest, FetchPartition)
        if request is None:
            request = decode_fetch_request(version, memoryview(ctx.frame), header.size)
        if request.replica_id < 0 or self.authorizer is not None:
            return self._handle_fetch(ctx, version, request)
        context = self.fetch_manager.new_context(request, True)
        if context.error:
            chunks, _ = encode_fetch_response(version, ctx.header.correlation_id, [], error_code=context.error)
            if self._fetch_stats_api is not None:
                self._fetch_stats_api.error(context.error)
            ctx.send_response(chunks)
            return
        self._quota_exempt = True  # a follower's fetch: replication is not a client's request time
        key = (request.replica_id, request.max_wait_ms, request.min_bytes, request.max_bytes, request.isolation_level)
        params = self._follower_params.get(key)
        if params is None:
            if len(self._follower_params) >= 64:  # bounded: followers asking ever other things
                self._follower_params.clear()
            params = self._follower_params[key] = FetchParams(*key)
        replica_manager = self.replica_manager
        op = replica_manager.fetch_messages(params, context.topics, functools.partial(
            self._follower_respond, ctx, context, version, replica_manager.topic_stats))
        if op is not None:
            ctx.on_cancel(op.cancel)  # the connection closes: the long-poll goes with it

    def _follower_respond(self, ctx: "RequestContext", context, version: int, topic_stats, results: list) -> None:
        """handle_fetch_request's ``respond`` for a follower's fetch without an authorizer."""
        replication_quotas = self.replica_manager.replication_quotas
        if replication_quotas is not None and replication_quotas.leader.throttled:
            _record_leader_quota(replication_quotas.leader, results)
        if topic_stats is not None:
            if len(results) == 1 and len(results[0][1]) == 1:
                # _fetch_stats of one partition (a follower of a single partition: every fetch)
                topic, (pd,) = results[0]
                stats = topic_stats.topics.get(topic) or topic_stats.topic(topic)  # (topic(), its call when new)
                stats.fetch_requests += 1
                if pd.error_code:
                    stats.failed_fetch += 1
                    if self._fetch_stats_api is not None:
                        self._fetch_stats_api.error(pd.error_code)
                elif pd.records is not None:
                    stats.replication_bytes_out += len(pd.records)
            else:
                self._fetch_stats(results, topic_stats, True)
        results, session_id, error = context.response(results)
        encoded = None
        if encode_fetch_c is not None:  # (encode_fetch_response's first step, its call saved)
            encoded = encode_fetch_c(version, ctx.header.correlation_id, results, 0, error, session_id, FetchPartitionData)
        if encoded is None:
            encoded = encode_fetch_response(version, ctx.header.correlation_id, results, session_id=session_id,
                                            error_code=error)
        ctx.send_response(encoded[0])

    def _fetch_stats(self, results: list, topic_stats, replication: bool) -> None:
        """BrokerTopicMetrics of a Fetch answered: reads per partition, failed ones, bytes out
        (to followers: replication bytes out, as Kafka counts them)."""
        api = self._fetch_stats_api
        for topic, parts in results:
            stats = topic_stats.topic(topic)
            for pd in parts:
                stats.fetch_requests += 1
                if pd.error_code:
                    stats.failed_fetch += 1
                    if api is not None:
                        api.error(pd.error_code)
                elif pd.records is not None:
                    if replication:
                        stats.replication_bytes_out += len(pd.records)
                    else:
                        stats.bytes_out += len(pd.records)

    # -- ListOffsets -----------------------------------------------------------------------
    def handle_list_offsets_request(self, ctx: "RequestContext") -> None:
        api = APIS[ApiKey.LIST_OFFSETS]
        req = self.parse(ctx, api)
        version = ctx.api_version
        client = req.replica_id < 0 and req.replica_id != -2
        isolation = req.isolation_level if (client and version >= 2) else (0 if client else None)
        allowed = self.authorized_names(ctx, Operation.DESCRIBE, ResourceType.TOPIC, (t.name for t in req.topics))
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                out = {"partition_index": p.partition_index}
                if t.name not in allowed:
                    out.update(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, timestamp=-1, offset=-1)
                    parts.append(out)
                    continue
                try:
                    ts, offset, epoch = self.replica_manager.fetch_offset_for_timestamp(
                        t.name, p.partition_index, p.timestamp, isolation, p.current_leader_epoch, client)
                    out.update(error_code=0, timestamp=ts, offset=offset, leader_epoch=epoch)
                except KafkaError as exc:
                    out.update(error_code=exc.error_code, timestamp=-1, offset=-1)
                parts.append(out)
            topics.append({"name": t.name, "partitions": parts})
        self.send(ctx, api, {"topics": topics})

    # -- DeleteRecords, DescribeLogDirs, DescribeCluster (issue 27) ------------------------
    def handle_delete_records_request(self, ctx: "RequestContext") -> None:
        """Kafka's handleDeleteRecordsRequest: DELETE on each topic, then each partition this
        broker leads has its log start offset moved; the answer waits for the followers."""
        api = APIS[ApiKey.DELETE_RECORDS]
        req = self.parse(ctx, api)
        allowed = self.authorized_names(ctx, Operation.DELETE, ResourceType.TOPIC, (t.name for t in req.topics))
        refused: dict[tuple[str, int], int] = {}
        offsets = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                if t.name not in allowed:
                    refused[(t.name, p.partition_index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                elif not self.metadata_cache.contains_partition(t.name, p.partition_index):
                    refused[(t.name, p.partition_index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    parts.append((p.partition_index, p.offset))
            offsets.append((t.name, parts))

        def respond(results: list) -> None:
            done = {(t, r["partition_index"]): r for t, rs in results for r in rs}
            topics = []
            for t in req.topics:
                rows = []
                for p in t.partitions:
                    key = (t.name, p.partition_index)
                    rows.append(done.get(key) or {"partition_index": p.partition_index, "low_watermark": -1,
                                                  "error_code": refused[key]})
                topics.append({"name": t.name, "partitions": rows})
            self.send(ctx, api, {"throttle_time_ms": 0, "topics": topics})

        op = self.replica_manager.delete_records(req.timeout_ms, offsets, respond)
        if op is not None:
            ctx.on_cancel(op.cancel)

    def handle_describe_log_dirs_request(self, ctx: "RequestContext") -> None:
        """Kafka's handleDescribeLogDirsRequest: DESCRIBE on the cluster, else
        CLUSTER_AUTHORIZATION_FAILED (v3+; no results before); per log dir, the partitions asked
        for (all when ``topics`` is null) that live there: size, offset lag (how far the log end
        is behind the high watermark, as Kafka's getLogEndOffsetLag), is_future false (no
        AlterReplicaLogDirs), and the file system's total and usable bytes (v4+)."""
        api = APIS[ApiKey.DESCRIBE_LOG_DIRS]
        req = self.parse(ctx, api)
        if not self.authorize(ctx, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
            return self.send(ctx, api, {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                        "results": []})
        wanted = None if req.topics is None else {(t.topic, p) for t in req.topics for p in t.partitions}
        self.send(ctx, api, {"throttle_time_ms": 0, "error_code": 0,
                             "results": self.replica_manager.describe_log_dirs(wanted)})

    def handle_describe_cluster_request(self, ctx: "RequestContext") -> None:
        """Kafka's handleDescribeCluster on a broker: the cluster id, the controller as Metadata
        names it, the live brokers on this listener (with racks) and, when asked, the cluster
        operations the principal may perform (0 without DESCRIBE on the cluster). A broker gives
        broker endpoints only: endpoint_type CONTROLLER is MISMATCHED_ENDPOINT_TYPE, an unknown one
        UNSUPPORTED_ENDPOINT_TYPE (INVALID_REQUEST in v0)."""
        api = APIS[ApiKey.DESCRIBE_CLUSTER]
        req = self.parse(ctx, api)
        version = ctx.api_version
        endpoint_type = req.endpoint_type if version >= 1 else 1
        body: dict = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "endpoint_type": endpoint_type,
                      "cluster_id": self.metadata_cache.cluster_id or "", "controller_id": -1, "brokers": []}
        if endpoint_type != 1:  # Kafka's AuthHelper.computeDescribeClusterResponse
            if endpoint_type == 2:
                code, message = ErrorCode.MISMATCHED_ENDPOINT_TYPE, ("The request was sent to an endpoint of type "
                                                                     "BROKER, but we wanted an endpoint of type CONTROLLER")
            else:
                code, message = ErrorCode.UNSUPPORTED_ENDPOINT_TYPE, f"Unsupported endpoint type {endpoint_type}"
            log.warning("DescribeCluster v%d from %s refused: %s", version, ctx.peer, message)
            body.update(error_code=code if version > 0 else ErrorCode.INVALID_REQUEST, error_message=message)
            return self.send(ctx, api, body)
        if req.include_cluster_authorized_operations:
            body["cluster_authorized_operations"] = (
                self.authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
                if self.authorize(ctx, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME) else 0)
        for b in self.metadata_cache.alive_brokers():
            ep = b.endpoint(ctx.listener_name) or next(iter(b.endpoints.values()), None)
            if ep is not None:
                body["brokers"].append({"broker_id": b.broker_id, "host": ep.host, "port": ep.port, "rack": b.rack,
                                        "is_fenced": False})
        body["controller_id"] = self._client_controller_id()
        self.send(ctx, api, body)

    # -- Metadata --------------------------------------------------------------------------
    def handle_metadata_request(self, ctx: "RequestContext") -> None:
        api = APIS[ApiKey.METADATA]
        req = self.parse(ctx, api)
        version = ctx.api_version
        cache = self.metadata_cache
        if req.topics is None or (version == 0 and not req.topics):
            names = sorted(cache.topics)
            explicit = False
        else:
            names = [t.name for t in req.topics]
            explicit = True
        allow_auto = req.allow_auto_topic_creation if version >= 4 else True
        names = [n for n in names if n is not None]
        # Kafka: topics the principal may not DESCRIBE are left out of an all-topics answer and
        # TOPIC_AUTHORIZATION_FAILED when named; a named topic that does not exist and would be
        # auto-created needs CREATE (on the cluster or the topic), else it is refused likewise.
        refused: set[str] = set()
        if self.authorizer is not None:
            described = self.authorized_names(ctx, Operation.DESCRIBE, ResourceType.TOPIC, names, explicit)
            if not explicit:
                names = [n for n in names if n in described]
            else:
                refused = {n for n in names if n not in described}
                missing = {n for n in described if not cache.contains_topic(n)}
                if (missing and allow_auto and self.config_repository.config["auto.create.topics.enable"]
                        and not self.authorize(ctx, Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, False)):
                    refused |= missing - self.authorized_names(ctx, Operation.CREATE, ResourceType.TOPIC, missing)
        with_ops = version >= 8 and req.include_topic_authorized_operations
        topics = []
        for name in names:
            if name in refused:
                topics.append({"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": name,
                               "is_internal": is_internal_topic(name), "partitions": []})
                continue
            if explicit and not cache.contains_topic(name):
                code = self.topic_admin.maybe_auto_create_topic(name, allow_auto)
                if code != ErrorCode.NONE:
                    topics.append({"error_code": code, "name": name, "is_internal": False, "partitions": []})
                    continue
            info = cache.topics.get(name)
            if info is None:
                topics.append({"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": name, "partitions": []})
                continue
            entry = self._topic_metadata(info, version, ctx.listener_name)
            if with_ops:
                entry["topic_authorized_operations"] = self.authorized_operations(ctx, ResourceType.TOPIC, name)
            topics.append(entry)
        brokers = []
        for b in cache.alive_brokers():
            ep = b.endpoint(ctx.listener_name) or next(iter(b.endpoints.values()), None)
            if ep is not None:
                brokers.append({"node_id": b.broker_id, "host": ep.host, "port": ep.port, "rack": b.rack})
        body = {"brokers": brokers, "cluster_id": cache.cluster_id, "controller_id": self._client_controller_id(),
                "topics": topics}
        if 8 <= version <= 10 and req.include_cluster_authorized_operations:
            body["cluster_authorized_operations"] = self.authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
        self.send(ctx, api, body)

    def _client_controller_id(self) -> int:
        """The controller id clients see: the active controller when it is also a live broker
        (a combined node); otherwise, as Kafka's KRaft brokers answer, a live broker, since
        clients send controller-bound admin requests (CreateTopics, ...) to the node named here
        and only brokers are reachable to them; the broker forwards them. Kafka names a random
        live broker; kbroker names the lowest live id, the same answer from every broker, so an
        admin client that refreshes metadata from whichever node is least loaded does not hop to
        a new "controller" on every refresh (kafka-python then sent a request to a broker it had
        just seen die)."""
        cache = self.metadata_cache
        if cache.controller_id in cache.brokers or not cache.brokers:
            return cache.controller_id
        return min(cache.brokers)

    def _topic_metadata(self, info, version: int, listener_name: str) -> dict:
        alive = self.metadata_cache.brokers
        parts = []
        for index in sorted(info.partitions):
            p = info.partitions[index]
            error = ErrorCode.NONE
            leader = p.leader
            if leader not in alive:
                error, leader = ErrorCode.LEADER_NOT_AVAILABLE, -1
            replicas = list(p.replicas)
            isr = list(p.isr)
            if version == 0 and any(r not in alive for r in replicas):
                error = error or ErrorCode.REPLICA_NOT_AVAILABLE
            parts.append({"error_code": error, "partition_index": index, "leader_id": leader,
                          "leader_epoch": p.leader_epoch, "replica_nodes": replicas, "isr_nodes": isr,
                          "offline_replicas": [r for r in replicas if r not in alive]})
        return {"error_code": ErrorCode.NONE, "name": info.name, "topic_id": info.topic_id,
                "is_internal": is_internal_topic(info.name), "partitions": parts}

    # -- ApiVersions -----------------------------------------------------------------------
    def handle_api_versions_request(self, ctx: "RequestContext") -> None:
        api = APIS[ApiKey.API_VERSIONS]
        version = ctx.api_version
        corr = ctx.header.correlation_id
        if not api.supports(version):
            # KIP-511: answer in a v0 body, listing ApiVersions' own range, so the client falls back.
            body = api.response.build(0, {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": [
                {"api_key": ApiKey.API_VERSIONS, "min_version": api.min_version, "max_version": api.max_version}]})
            ctx.send_response(frame_response(api.key, 0, corr, body))
            return
        error = ErrorCode.NONE
        try:
            req = api.request.parse(version, ctx.frame, ctx.body_offset)
            if version >= 3 and not (_SOFTWARE_NAME.match(req.client_software_name or "")
                                     and _SOFTWARE_NAME.match(req.client_software_version or "")):
                error = ErrorCode.INVALID_REQUEST
        except SchemaError:
            error = ErrorCode.INVALID_REQUEST
        keys = [{"api_key": k, "min_version": lo, "max_version": hi} for k, lo, hi in self.api_versions]
        if error:
            log.warning("ApiVersions v%d from %s rejected: %s", version, ctx.peer, ErrorCode(error).name)
        self.send(ctx, api, {"error_code": error, "api_keys": keys, "throttle_time_ms": 0})

    # -- admin -----------------------------------------------------------------------------
    def handle_create_topics_request(self, ctx: "RequestContext") -> None:
        api = APIS[ApiKey.CREATE_TOPICS]
        req = self.parse(ctx, api)
        results: list[dict | None] = []
        to_create: list[tuple[int, NewTopic]] = []  # (slot in results, topic) for the topic admin
        seen: set[str] = set()
        # Kafka's controller: CREATE on the cluster allows every topic, else CREATE on each.
        cluster_create = self.authorize(ctx, Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, False)
        for t in req.topics:
            if t.name in seen:
                results.append({"name": t.name, "error_code": ErrorCode.INVALID_REQUEST,
                                "error_message": "topic listed twice"})
                continue
            seen.add(t.name)
            if not cluster_create and not self.authorize(ctx, Operation.CREATE, ResourceType.TOPIC, t.name):
                results.append({"name": t.name, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                "error_message": "Authorization failed."})
                continue
            assignments = {a.partition_index: list(a.broker_ids) for a in t.assignments}
            configs = {c.name: c.value for c in t.configs}
            to_create.append((len(results), NewTopic(t.name, t.num_partitions, t.replication_factor, assignments,
                                                     configs)))
            results.append(None)

        def respond(outcomes: list["TopicResult"]) -> None:
            for (slot, topic), (code, message) in zip(to_create, outcomes):
                results[slot] = {"name": topic.name, "error_code": code, "error_message": message}
            self.send(ctx, api, {"topics": results})

        self.topic_admin.create_topics([topic for _, topic in to_create], req.validate_only, respond,
                                       timeout_ms=req.timeout_ms)

    def handle_delete_topics_request(self, ctx: "RequestContext") -> None:
        api = APIS[ApiKey.DELETE_TOPICS]
        req = self.parse(ctx, api)
        results: list[dict | None] = []
        to_delete: list[tuple[int, str]] = []  # (slot in results, name) for the topic admin
        # Kafka's controller: DELETE on the cluster allows every topic; else a topic the
        # principal may not DESCRIBE is refused before anyone says whether it exists, and one
        # it may describe but not DELETE after.
        cluster_delete = self.authorize(ctx, Operation.DELETE, ResourceType.CLUSTER, CLUSTER_NAME, False)
        for name in req.topic_names:
            refused = not cluster_delete and (
                not self.authorize(ctx, Operation.DESCRIBE, ResourceType.TOPIC, name)
                or (self.metadata_cache.contains_topic(name)
                    and not self.authorize(ctx, Operation.DELETE, ResourceType.TOPIC, name)))
            if refused:
                results.append({"name": name, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                "error_message": ERROR_MESSAGES[ErrorCode.TOPIC_AUTHORIZATION_FAILED]})
                continue
            to_delete.append((len(results), name))
            results.append(None)

        def respond(outcomes: list["TopicResult"]) -> None:
            for (slot, name), (code, message) in zip(to_delete, outcomes):
                results[slot] = {"name": name, "error_code": code, "error_message": message}
            self.send(ctx, api, {"responses": results})

        self.topic_admin.delete_topics([name for _, name in to_delete], respond, timeout_ms=req.timeout_ms)

    def handle_forwarded_request(self, ctx: "RequestContext") -> None:
        """CreatePartitions, IncrementalAlterConfigs, AlterConfigs, ElectLeaders, CreateAcls,
        DeleteAcls, AlterUserScramCredentials: the active controller decides; the request goes
        there as it came and its answer comes back. This broker runs the controller's
        authorization first, with the client's principal (security/request_checks.py): refused
        entries are answered here and left out of what is forwarded (the request re-encoded),
        a request refused whole is not forwarded."""
        api = APIS[ctx.header.api_key]
        req = self.parse(ctx, api)
        version, correlation_id = ctx.api_version, ctx.header.correlation_id
        if api.key in (ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS) and self._acl_request_invalid(ctx, api, req):
            return
        reconfiguration = self.listener_reconfiguration
        if reconfiguration is not None and reconfiguration.handles(api.key, req):
            # this broker's key stores (KIP-226): applied here (broker/security/reconfigure.py)
            allowed = self.authorize(ctx, Operation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME)
            return self.send(ctx, api, reconfiguration.apply(api.key, req, allowed))
        body = bytes(memoryview(ctx.frame)[ctx.body_offset:])
        complete = None
        if api.key in (ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.ALTER_CONFIGS):
            # a broker's own dynamic configs are changed through that broker (Kafka's preprocess)
            elsewhere = request_checks.broker_resources_of_others(req, self.metadata_cache.broker_id)
            if elsewhere.complete is not None:
                complete = elsewhere.complete
                if elsewhere.request is None:
                    return self.send(ctx, api, complete(request_checks.empty_response(api.key)))
                body = api.request.build(version, elsewhere.request)
        if self.authorizer is not None:
            checked = request_checks.screen(api.key, req, lambda *a: self.authorize(ctx, *a),
                                            self.metadata_cache.contains_topic)
            if checked.error is not None:
                return self.send(ctx, api, forwarding_error_response(api.key, req, checked.error,
                                                                     ERROR_MESSAGES.get(checked.error)))
            if checked.complete is not None:
                first, second = complete, checked.complete
                complete = second if first is None else (lambda response: first(second(response)))
                if checked.request is None:
                    return self.send(ctx, api, complete(request_checks.empty_response(api.key)))
                body = api.request.build(version, checked.request)
        elif api.key in (ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS):
            # Kafka's AclApis: no authorizer, no ACLs.
            return self.send(ctx, api, forwarding_error_response(
                api.key, req, ErrorCode.SECURITY_DISABLED, "No Authorizer is configured."))

        def respond(data: bytes) -> None:
            if complete is not None:
                try:
                    data = api.response.build(version, complete(api.response.parse(version, data)))
                except SchemaError:
                    log.warning("%s: the controller's answer does not parse; passed on as it is", api.name)
            ctx.send_response(frame_response(api.key, version, correlation_id, data))

        self.forwarding.forward(api.key, version, body, req, respond)

    def handle_describe_configs_request(self, ctx: "RequestContext") -> None:
        api = APIS[ApiKey.DESCRIBE_CONFIGS]
        req = self.parse(ctx, api)
        results = []
        for res in req.resources:
            # Kafka: DESCRIBE_CONFIGS on the topic, or on the cluster for a broker (or broker logger).
            if res.resource_type == 2:
                refused = not self.authorize(ctx, Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, res.resource_name)
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif res.resource_type in (4, 8):
                refused = not self.authorize(ctx, Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME)
                code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            else:
                refused = False
            if refused:
                results.append({"error_code": code, "error_message": ERROR_MESSAGES[code], "configs": [],
                                "resource_type": res.resource_type, "resource_name": res.resource_name})
                continue
            keys = None if res.configuration_keys is None else set(res.configuration_keys)
            code, message, entries = self.config_repository.describe_configs(res.resource_type, res.resource_name)
            configs = [{"name": name, "value": value, "read_only": read_only, "config_source": source,
                        "is_default": source == 5, "is_sensitive": False, "synonyms": []}
                       for name, value, read_only, source in entries if keys is None or name in keys]
            results.append({"error_code": code, "error_message": message, "resource_type": res.resource_type,
                            "resource_name": res.resource_name, "configs": configs})
        self.send(ctx, api, {"results": results})

    def handle_init_producer_id_request(self, ctx: "RequestContext") -> None:
        """A new producer id (epoch 0) for an idempotent producer; with a transactional id, the
        transaction coordinator's answer (broker/transaction)."""
        api = APIS[ApiKey.INIT_PRODUCER_ID]
        req = self.parse(ctx, api)
        if req.transactional_id is not None:
            # Kafka checks WRITE on the transactional id first
            if not self.authorize(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
                return self.send(ctx, api, {"error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                            "producer_id": -1, "producer_epoch": -1})
            if self.transactions is None:  # (a broker without a controller: no coordinators)
                return self.send(ctx, api, {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                            "producer_id": -1, "producer_epoch": -1})
            return self.transactions.init_producer_id(ctx, req)
        # KIP-679: IDEMPOTENT_WRITE on the cluster, or WRITE on any topic.
        authorizer = self.authorizer
        if authorizer is not None and not (
                authorizer.authorize(ctx, Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME, False)
                or authorizer.authorize_by_resource_type(ctx, Operation.WRITE, ResourceType.TOPIC)):
            return self.send(ctx, api, {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                        "producer_id": -1, "producer_epoch": -1})

        def respond(error: int, producer_id: int) -> None:
            self.send(ctx, api, {"error_code": error, "producer_id": producer_id if not error else -1,
                                 "producer_epoch": 0 if not error else -1})

        self.producer_ids.generate(respond)

    # -- ACLs and SCRAM credentials (answered from this broker's copy of the controller's records)
    def _acl_request_invalid(self, ctx: "RequestContext", api: Api, req) -> bool:
        """A CreateAcls or DeleteAcls with an UNKNOWN (0, or unknown) type, pattern type,
        operation or permission does not parse in Kafka (the request classes refuse it), and
        the connection is closed; so here."""
        v0 = ctx.api_version == 0
        if api.key == ApiKey.CREATE_ACLS:
            bad = any(0 in (c.resource_type, 3 if v0 else c.resource_pattern_type, c.operation, c.permission_type)
                      for c in req.creations)
        else:
            bad = any(AclBindingFilter.of(f.resource_type_filter, f.resource_name_filter,
                                          3 if v0 else f.pattern_type_filter, f.principal_filter, f.host_filter,
                                          f.operation, f.permission_type).is_unknown() for f in req.filters)
        if bad:
            raise RemoteProtocolError(f"{api.name} holds an UNKNOWN resource type, pattern type, operation or "
                                      "permission")
        return False

    def handle_describe_acls_request(self, ctx: "RequestContext") -> None:
        """DESCRIBE on the cluster; the bindings matching the filter, grouped by resource
        pattern (Kafka's AclApis.handleDescribeAcls). No authorizer: SECURITY_DISABLED."""
        api = APIS[ApiKey.DESCRIBE_ACLS]
        req = self.parse(ctx, api)
        acl_filter = AclBindingFilter.of(req.resource_type_filter, req.resource_name_filter, req.pattern_type_filter,
                                         req.principal_filter, req.host_filter, req.operation, req.permission_type)
        if acl_filter.is_unknown():
            raise RemoteProtocolError("DescribeAcls filter holds UNKNOWN elements")
        if not self.authorize(ctx, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
            code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            return self.send(ctx, api, {"throttle_time_ms": 0, "error_code": code, "error_message": ERROR_MESSAGES[code],
                                        "resources": []})
        if self.authorizer is None:
            return self.send(ctx, api, {"throttle_time_ms": 0, "error_code": ErrorCode.SECURITY_DISABLED,
                                        "error_message": "No Authorizer is configured on the broker", "resources": []})
        self.send(ctx, api, {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
                             "resources": describe_acls_resources(self.authorizer.acls(acl_filter))})

    def handle_describe_user_scram_credentials_request(self, ctx: "RequestContext") -> None:
        """DESCRIBE on the cluster; each user's mechanisms and iterations from this broker's
        credential cache (Kafka's ScramImage.describe): every user when none is named, a user
        named twice DUPLICATE_RESOURCE, one without credentials RESOURCE_NOT_FOUND."""
        api = APIS[ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS]
        req = self.parse(ctx, api)
        if not self.authorize(ctx, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
            code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            message = ERROR_MESSAGES[code]
            return self.send(ctx, api, {"throttle_time_ms": 0, "error_code": code, "error_message": message,
                                        "results": [{"user": "", "error_code": code, "error_message": message,
                                                     "credential_infos": []} for _u in req.users or ()]})
        self.send(ctx, api, {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
                             "results": describe_scram_credentials(self.credential_cache,
                                                                   None if not req.users else [u.name for u in req.users])})

    # -- the group coordinator -------------------------------------------------------------
    def handle_find_coordinator_request(self, ctx: "RequestContext") -> None:
        """The coordinator of a group: the leader of its __consumer_offsets partition (created
        on first use); v4+ asks for several keys at once. Without a group coordinator (a
        broker driven by a static controller in tests) none is available."""
        api = APIS[ApiKey.FIND_COORDINATOR]
        req = self.parse(ctx, api)
        version = ctx.api_version
        gc, offsets_topic = self.group_coordinator, self.offsets_topic
        # Kafka: DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED) or on the transactional id
        # (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), per key.
        keys = [req.key] if version < 4 else list(req.coordinator_keys)
        refused = {}
        if self.authorizer is not None:
            for key in keys:
                if req.key_type == 0 and not self.authorize(ctx, Operation.DESCRIBE, ResourceType.GROUP, key):
                    refused[key] = ErrorCode.GROUP_AUTHORIZATION_FAILED
                elif req.key_type == 1 and not self.authorize(ctx, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                                              key):
                    refused[key] = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        send = lambda body: self.send(ctx, api, body)  # noqa: E731
        if refused:
            def one(key: str, code: int) -> dict:
                return {"error_code": code, "error_message": ERROR_MESSAGES[code], "node_id": -1, "host": "", "port": -1}
            if version < 4:
                return send(one(req.key, refused[req.key]))
            req.coordinator_keys = [k for k in keys if k not in refused]

            def send(body: dict) -> None:  # type: ignore[misc]
                found = iter(body["coordinators"])
                body["coordinators"] = [{"key": k, **one(k, refused[k])} if k in refused else next(found) for k in keys]
                self.send(ctx, api, body)
            if not req.coordinator_keys:
                return send({"coordinators": []})
        if req.key_type == 1:
            return self._find_transaction_coordinators(ctx, req, version, keys, send)
        if gc is None or offsets_topic is None:
            return send(error_response(api.key, req, version, ErrorCode.COORDINATOR_NOT_AVAILABLE))
        listener = ctx.listener_name
        gc.find_coordinator(req, version, lambda partition: offsets_topic.locate(partition, listener), send)

    def _find_transaction_coordinators(self, ctx: "RequestContext", req, version: int, keys: list[str],
                                       send: Callable[[dict], None]) -> None:
        """FindCoordinator(TRANSACTION): the leader of the id's __transaction_state partition
        (created on first use, COORDINATOR_NOT_AVAILABLE meanwhile)."""
        def one(key: str) -> dict:
            if self.transactions is None:
                code, node, host, port = ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
            else:
                code, node, host, port = self.transactions.locate(key, ctx.listener_name)
            return {"error_code": code, "error_message": None if not code else ErrorCode(code).name,
                    "node_id": node, "host": host, "port": port}
        if version < 4:
            return send(one(req.key))
        send({"coordinators": [{"key": k, **one(k)} for k in req.coordinator_keys]})

    def attach_transactions(self, transactions) -> None:
        """The transaction coordinator's APIs (broker/transaction/handlers.py)."""
        self.transactions = transactions
        handlers = transactions.handlers()
        if self.group_coordinator is None:
            handlers.pop(ApiKey.TXN_OFFSET_COMMIT, None)
        self.handlers.update(handlers)
        self.api_versions = sorted((key, *APIS[key].advertise) for key in self.handlers if key in APIS)

    def _group_request(self, ctx: "RequestContext"):
        api = APIS[ctx.header.api_key]
        return api, self.parse(ctx, api), (lambda body: self.send(ctx, api, body))

    def _client_host(self, ctx: "RequestContext") -> str:
        """The client's address as Kafka shows it in DescribeGroups: "/127.0.0.1"."""
        return "/" + ctx.peer.rsplit(":", 1)[0]

    def _group_denied(self, ctx: "RequestContext", api: Api, req, operation: int, group_id: str) -> bool:
        """Answer the whole group request GROUP_AUTHORIZATION_FAILED unless the principal may
        do ``operation`` on the group."""
        if self.authorize(ctx, operation, ResourceType.GROUP, group_id):
            return False
        self.send(ctx, api, error_response(api.key, req, ctx.api_version, ErrorCode.GROUP_AUTHORIZATION_FAILED))
        return True

    def handle_join_group_request(self, ctx: "RequestContext") -> None:
        api, req, respond = self._group_request(ctx)
        assert self.group_coordinator is not None
        if self._group_denied(ctx, api, req, Operation.READ, req.group_id):
            return
        self.group_coordinator.join_group(req, ctx.api_version, ctx.client_id, self._client_host(ctx), respond)

    def handle_sync_group_request(self, ctx: "RequestContext") -> None:
        api, req, respond = self._group_request(ctx)
        assert self.group_coordinator is not None
        if self._group_denied(ctx, api, req, Operation.READ, req.group_id):
            return
        self.group_coordinator.sync_group(req, ctx.api_version, respond)

    def handle_heartbeat_request(self, ctx: "RequestContext") -> None:
        api, req, respond = self._group_request(ctx)
        assert self.group_coordinator is not None
        if self._group_denied(ctx, api, req, Operation.READ, req.group_id):
            return
        self.group_coordinator.heartbeat(req, ctx.api_version, respond)

    def handle_leave_group_request(self, ctx: "RequestContext") -> None:
        api, req, respond = self._group_request(ctx)
        assert self.group_coordinator is not None
        if self._group_denied(ctx, api, req, Operation.READ, req.group_id):
            return
        self.group_coordinator.leave_group(req, ctx.api_version, respond)

    def handle_offset_commit_request(self, ctx: "RequestContext") -> None:
        """READ on the group (else every partition GROUP_AUTHORIZATION_FAILED), and READ on
        each topic (else its partitions TOPIC_AUTHORIZATION_FAILED), as Kafka's KafkaApis."""
        api, req, respond = self._group_request(ctx)
        assert self.group_coordinator is not None
        if self._group_denied(ctx, api, req, Operation.READ, req.group_id):
            return
        if self.authorizer is not None:
            topics = list(req.topics)
            allowed = self.authorized_names(ctx, Operation.READ, ResourceType.TOPIC, (t.name for t in topics))
            if len(allowed) < len({t.name for t in topics}):
                req.topics = [t for t in topics if t.name in allowed]
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                respond = _merged_by_topic(topics, allowed, respond, "topics", lambda t: [
                    {"partition_index": p.partition_index, "error_code": code} for p in t.partitions])
        self.group_coordinator.offset_commit(req, ctx.api_version, respond)

    def handle_offset_fetch_request(self, ctx: "RequestContext") -> None:
        """DESCRIBE on the group; named topics the principal may not DESCRIBE answer
        TOPIC_AUTHORIZATION_FAILED, and all-topics answers leave them out."""
        api, req, respond = self._group_request(ctx)
        assert self.group_coordinator is not None
        if self._group_denied(ctx, api, req, Operation.DESCRIBE, req.group_id):
            return
        if self.authorizer is not None and req.topics is None:
            send = respond

            def respond(body: dict) -> None:
                body["topics"] = [t for t in body.get("topics", [])
                                  if self.authorize(ctx, Operation.DESCRIBE, ResourceType.TOPIC, t["name"], False)]
                send(body)
        elif self.authorizer is not None:
            topics = list(req.topics)
            allowed = self.authorized_names(ctx, Operation.DESCRIBE, ResourceType.TOPIC, (t.name for t in topics))
            if len(allowed) < len({t.name for t in topics}):
                req.topics = [t for t in topics if t.name in allowed]
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                respond = _merged_by_topic(topics, allowed, respond, "topics", lambda t: [
                    {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
                     "error_code": code} for p in t.partition_indexes])
        self.group_coordinator.offset_fetch(req, ctx.api_version, respond)

    def handle_offset_delete_request(self, ctx: "RequestContext") -> None:
        """DELETE on the group; READ on each topic (else TOPIC_AUTHORIZATION_FAILED)."""
        api, req, respond = self._group_request(ctx)
        assert self.group_coordinator is not None
        if self._group_denied(ctx, api, req, Operation.DELETE, req.group_id):
            return
        if self.authorizer is not None:
            topics = list(req.topics)
            allowed = self.authorized_names(ctx, Operation.READ, ResourceType.TOPIC, (t.name for t in topics))
            if len(allowed) < len({t.name for t in topics}):
                req.topics = [t for t in topics if t.name in allowed]
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                respond = _merged_by_topic(topics, allowed, respond, "topics", lambda t: [
                    {"partition_index": p.partition_index, "error_code": code} for p in t.partitions])
        self.group_coordinator.offset_delete(req, ctx.api_version, respond)

    def handle_list_groups_request(self, ctx: "RequestContext") -> None:
        """Every group with DESCRIBE on the cluster, else those the principal may DESCRIBE."""
        api, req, respond = self._group_request(ctx)
        assert self.group_coordinator is not None
        if not self.authorize(ctx, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME, False):
            send = respond

            def respond(body: dict) -> None:
                body["groups"] = [g for g in body["groups"]
                                  if self.authorize(ctx, Operation.DESCRIBE, ResourceType.GROUP, g["group_id"], False)]
                send(body)
        self.group_coordinator.list_groups(req, ctx.api_version, respond)

    def handle_describe_groups_request(self, ctx: "RequestContext") -> None:
        """DESCRIBE on each group (else its entry GROUP_AUTHORIZATION_FAILED), with what the
        principal may do to each when asked (v3+)."""
        api, req, respond = self._group_request(ctx)
        assert self.group_coordinator is not None
        groups = list(req.groups)
        allowed = self.authorized_names(ctx, Operation.DESCRIBE, ResourceType.GROUP, groups)
        with_ops = ctx.api_version >= 3 and req.include_authorized_operations
        if len(allowed) < len(set(groups)) or (with_ops and self.authorizer is not None):
            req.groups = [g for g in groups if g in allowed]
            send = respond
            refused_group = {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "group_state": "",
                             "protocol_type": "", "protocol_data": "", "members": []}

            def respond(body: dict) -> None:
                described = iter(body["groups"])
                out = []
                for g in groups:
                    if g not in allowed:
                        out.append({**refused_group, "group_id": g})
                        continue
                    entry = next(described)
                    if with_ops:
                        entry["authorized_operations"] = self.authorized_operations(ctx, ResourceType.GROUP, g)
                    out.append(entry)
                body["groups"] = out
                send(body)
        self.group_coordinator.describe_groups(req, ctx.api_version, respond)

    def handle_delete_groups_request(self, ctx: "RequestContext") -> None:
        """DELETE on each group (else GROUP_AUTHORIZATION_FAILED for it)."""
        api, req, respond = self._group_request(ctx)
        assert self.group_coordinator is not None
        names = list(dict.fromkeys(req.groups_names))
        allowed = self.authorized_names(ctx, Operation.DELETE, ResourceType.GROUP, names)
        if len(allowed) < len(names):
            req.groups_names = [g for g in names if g in allowed]
            send = respond

            def respond(body: dict) -> None:
                got = {r["group_id"]: r for r in body["results"]}
                body["results"] = [got.get(g) or {"group_id": g, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
                                   for g in names]
                send(body)
        self.group_coordinator.delete_groups(req, ctx.api_version, respond)

    # -- replication and the control plane -------------------------------------------------
    def handle_offset_for_leader_epoch_request(self, ctx: "RequestContext") -> None:
        api = APIS[ApiKey.OFFSET_FOR_LEADER_EPOCH]
        req = self.parse(ctx, api)
        # Kafka (KIP-320): CLUSTER_ACTION on the cluster (followers), else DESCRIBE on each topic.
        if self.authorize(ctx, Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME, False):
            allowed = None
        else:
            allowed = self.authorized_names(ctx, Operation.DESCRIBE, ResourceType.TOPIC, (t.topic for t in req.topics))
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                partition = self.replica_manager.get_partition(t.topic, p.partition)
                if allowed is not None and t.topic not in allowed:
                    error, epoch, end = ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1, -1
                elif partition is None:
                    error, epoch, end = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1
                else:
                    # Only the leader answers, except for the debugging replica id -2.
                    error, epoch, end = partition.last_offset_for_leader_epoch(
                        p.current_leader_epoch, p.leader_epoch, require_leader=req.replica_id != -2)
                parts.append({"error_code": error, "partition": p.partition, "leader_epoch": epoch,
                              "end_offset": end})
            topics.append({"topic": t.topic, "partitions": parts})
        self.send(ctx, api, {"topics": topics})

    def _cluster_action_denied(self, ctx: "RequestContext") -> bool:
        """Kafka's authorizeClusterOperation(CLUSTER_ACTION): the controller's requests come
        from a principal holding CLUSTER_ACTION on the cluster (a super user, or granted it)."""
        if self.authorize(ctx, Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
            return False
        log.warning("%s from %s (%s) refused: CLUSTER_AUTHORIZATION_FAILED, no ClusterAction permission",
                    APIS[ctx.header.api_key].name, ctx.peer, ctx.principal)
        return True

    def handle_leader_and_isr_request(self, ctx: "RequestContext") -> None:
        api = APIS[ApiKey.LEADER_AND_ISR]
        version = ctx.api_version
        req = decode_leader_and_isr_request(version, memoryview(ctx.frame), ctx.body_offset)
        if version <= 1:
            grouped = [(ps.topic_name, None, [ps]) for ps in req.ungrouped_partition_states]
        else:
            grouped = [(ts.topic_name, ts.topic_id, ts.partition_states) for ts in req.topic_states]
        states = [LeaderAndIsrState(topic, ps.partition_index, ps.controller_epoch, ps.leader, ps.leader_epoch,
                                    list(ps.isr), ps.partition_epoch, list(ps.replicas), ps.is_new,
                                    tuple(ps.adding_replicas), tuple(ps.removing_replicas))
                  for topic, _id, parts in grouped for ps in parts]
        if self._cluster_action_denied(ctx):
            error, results = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, {
                (s.topic, s.partition): ErrorCode.CLUSTER_AUTHORIZATION_FAILED for s in states}
        elif self._broker_epoch_stale(ctx, req.broker_epoch):
            error, results = ErrorCode.STALE_BROKER_EPOCH, {
                (s.topic, s.partition): ErrorCode.STALE_BROKER_EPOCH for s in states}
        else:
            # Leaders the fetchers will need to reach (Kafka's LiveLeaders).
            listener = self.inter_broker_listener
            for leader in req.live_leaders:
                if leader.broker_id not in self.metadata_cache.brokers:
                    self.metadata_cache.brokers[leader.broker_id] = BrokerInfo(
                        leader.broker_id, {listener: BrokerEndpoint(listener, leader.host_name, leader.port)})
            if len(states) > LEADER_AND_ISR_SLICE or self._controller_requests:
                self._apply_leader_and_isr_in_slices(ctx, api, req, grouped, states)
                return
            error, results = self.replica_manager.become_leader_or_follower(req.controller_id, req.controller_epoch,
                                                                            states)
            if error == ErrorCode.NONE and req.type == REQUEST_TYPE_FULL:
                self.replica_manager.delete_stray_partitions({(s.topic, s.partition) for s in states})
        self._answer_leader_and_isr(ctx, api, grouped, error, results)

    def _in_controller_order(self, ctx: "RequestContext", apply: Callable[["RequestContext"], None]) -> None:
        """Apply a controller request now, or after the controller requests before it when a
        LeaderAndIsr is still being applied in slices: Kafka handles a controller's requests
        one after the other, in the order they came (an UpdateMetadata or a StopReplica must
        not overtake the LeaderAndIsr sent before it)."""
        if not self._controller_requests:
            apply(ctx)
            return

        def start() -> None:
            try:
                apply(ctx)
            except Exception:  # (on the loop's turn: nobody above to close the connection)
                log.exception("applying %s failed", APIS[ctx.header.api_key].name)
                ctx.close_connection(f"{APIS[ctx.header.api_key].name} failed")
            finally:
                self._next_controller_request()
        self._controller_requests.append(start)

    def _next_controller_request(self) -> None:
        """The controller request at the head of the queue is done: start the next, if any
        (on the next turn of the loop; at once without a loop)."""
        self._controller_requests.popleft()
        if self._controller_requests:
            following = self._controller_requests[0]
            try:
                asyncio.get_running_loop().call_soon(following)
            except RuntimeError:  # driven without a loop (synchronous unit tests)
                following()

    def _apply_leader_and_isr_in_slices(self, ctx: "RequestContext", api: Api, req, grouped, states) -> None:
        """A big LeaderAndIsr (a topic of thousands of partitions, a controller's full state)
        is applied LEADER_AND_ISR_SLICE partitions at a time, the loop turning between slices:
        creating a log costs milliseconds, and a loop held for seconds sends no heartbeat (the
        controller would fence this live broker, as Kafka's does not: its heartbeats leave from
        their own thread) and serves no client. Controller requests arriving meanwhile wait
        behind it (``_in_controller_order``); the answer goes once every slice was applied."""
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # driven without a loop (synchronous unit tests): all at once
            loop = None
        results: dict[tuple[str, int], int] = {}
        errors: list[int] = []
        position = 0

        def step() -> None:
            nonlocal position
            try:
                part = states[position:position + LEADER_AND_ISR_SLICE]
                position += len(part)
                error, res = self.replica_manager.become_leader_or_follower(req.controller_id, req.controller_epoch,
                                                                            part)
                results.update(res)
                errors.append(error)
            except Exception:
                log.exception("applying LeaderAndIsr from controller %d failed", req.controller_id)
                ctx.close_connection("LeaderAndIsr failed")
                position = len(states)
                errors.append(-1)
            if position < len(states):
                if loop is None:
                    return step()
                loop.call_soon(step)
                return
            heap.release()
            if -1 not in errors:  # (a failure closed the connection: the controller sends it again)
                error = next((e for e in errors if e != ErrorCode.NONE), ErrorCode.NONE)
                if error == ErrorCode.NONE and req.type == REQUEST_TYPE_FULL:
                    self.replica_manager.delete_stray_partitions({(s.topic, s.partition) for s in states})
                self._answer_leader_and_isr(ctx, api, grouped, error, results)
            self._next_controller_request()

        def start() -> None:
            # Applying it creates objects by the ten thousand: the cyclic collector's full
            # collections would scan the whole heap (every log, the controller's metadata)
            # again and again meanwhile; what exists now is frozen until the last slice
            # (and after it, while the broker's start holds it too: broker/heap.py).
            heap.hold()
            step()

        self._controller_requests.append(start)
        if len(self._controller_requests) == 1:
            start()

    def _answer_leader_and_isr(self, ctx: "RequestContext", api: Api, grouped, error: int,
                               results: dict[tuple[str, int], int]) -> None:
        version = ctx.api_version
        if version <= 4:
            response = LeaderAndIsrResponse(error, [LeaderAndIsrPartitionError(p, code, t)
                                                    for (t, p), code in results.items()])
            errors = [e.error_code for e in response.partition_errors]
        else:
            response = LeaderAndIsrResponse(error, topics=[
                LeaderAndIsrTopicError(topic_id, [LeaderAndIsrPartitionError(
                    ps.partition_index, results.get((topic, ps.partition_index), 0)) for ps in parts])
                for topic, topic_id, parts in grouped])
            errors = [e.error_code for t in response.topics for e in t.partition_errors]
        if self.request_metrics is not None:
            stats = self.request_metrics.api(api.key)
            for code in (error, *errors):
                if code:
                    stats.error(code)
        body = encode_leader_and_isr_response(version, response)
        ctx.send_response(frame_response(api.key, version, ctx.header.correlation_id, body))
        if error == ErrorCode.NONE:
            self._log_leader_and_isr(grouped, results)
        self.metadata_cache.updated()  # whoever waits for this broker to act on new metadata

    def _log_leader_and_isr(self, grouped, results: dict[tuple[str, int], int]) -> None:
        """One line per LeaderAndIsr (Kafka's state-change log has one per partition; that is
        kbroker.partition's DEBUG): what this broker leads and follows now, and what failed."""
        me = self.replica_manager.broker_id
        led, followed, leaderless, failed = [], [], [], []
        for topic, _id, parts in grouped:
            for ps in parts:
                key = (topic, ps.partition_index)
                code = results.get(key, ErrorCode.NONE)
                if code:
                    failed.append(f"{topic}-{ps.partition_index}: {error_name(code)}")
                else:
                    (led if ps.leader == me else followed if ps.leader >= 0 else leaderless).append(key)
        log.info("LeaderAndIsr applied for %d partition(s): leading %d%s; following %d%s%s%s",
                 len(led) + len(followed) + len(leaderless) + len(failed), len(led),
                 f" ({partition_names(led)})" if led else "",
                 len(followed), f" ({partition_names(followed)})" if followed else "",
                 f"; without a leader (offline, nothing to fetch) {len(leaderless)} ({partition_names(leaderless)})"
                 if leaderless else "",
                 f"; {len(failed)} failed ({', '.join(failed[:10])}{' ...' if len(failed) > 10 else ''})"
                 if failed else "")

    def _broker_epoch_stale(self, ctx: "RequestContext", request_epoch: int) -> bool:
        """Kafka's isBrokerEpochStale: a control request sent to an earlier registration of
        this broker (-1: the sender does not say) is refused with STALE_BROKER_EPOCH."""
        current = self.broker_epoch()
        if request_epoch == -1 or request_epoch >= current or BUG_STALE_BROKER_EPOCH_ACCEPTED:
            return False
        log.info("%s from %s refused: it was sent to broker epoch %d, this broker is at %d",
                 APIS[ctx.header.api_key].name, ctx.peer, request_epoch, current)
        return True

    def handle_update_metadata_request(self, ctx: "RequestContext") -> None:
        self._in_controller_order(ctx, self._update_metadata)

    def _update_metadata(self, ctx: "RequestContext") -> None:
        """The controller's view: the live (unfenced) brokers, the partitions' states, each
        topic's config overrides (kbroker's tag 10000: the whole set with every topic state) and
        the security records (tag 10001: ACLs and SCRAM credentials). A FULL request (sent on
        registration and to every broker by a new controller) replaces what this broker knew."""
        api = APIS[ApiKey.UPDATE_METADATA]
        req = decode_update_metadata_request(ctx.api_version, memoryview(ctx.frame), ctx.body_offset)
        if self._cluster_action_denied(ctx):
            return self.send(ctx, api, {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED})
        rm = self.replica_manager
        if req.controller_epoch < rm.controller_epoch:
            log.warning("ignoring UpdateMetadata from controller %d with stale epoch %d (current %d)",
                        req.controller_id, req.controller_epoch, rm.controller_epoch)
            return self.send(ctx, api, {"error_code": ErrorCode.STALE_CONTROLLER_EPOCH})
        if self._broker_epoch_stale(ctx, req.broker_epoch):
            return self.send(ctx, api, {"error_code": ErrorCode.STALE_BROKER_EPOCH})
        version = ctx.api_version
        rm.controller_epoch = req.controller_epoch
        if req.metadata_records or req.type == REQUEST_TYPE_FULL:
            self.security_metadata.apply(req.metadata_records, req.type == REQUEST_TYPE_FULL)
        cache = self.metadata_cache
        cache.controller_id = req.controller_id
        brokers = {}
        for b in req.live_brokers:
            if version == 0:
                endpoints = {"PLAINTEXT": BrokerEndpoint("PLAINTEXT", b.v0_host, b.v0_port)}
            else:
                endpoints = {(e.listener or "PLAINTEXT"): BrokerEndpoint(e.listener or "PLAINTEXT", e.host, e.port)
                             for e in b.endpoints}
            brokers[b.id] = BrokerInfo(b.id, endpoints, b.rack)
        if set(brokers) != set(cache.brokers):
            rm.live_brokers_changed()
        cache.brokers = brokers
        if version <= 4:
            grouped = [(ps.topic_name, None, [ps], None) for ps in req.ungrouped_partition_states]
        else:
            grouped = [(ts.topic_name, ts.topic_id, ts.partition_states,
                        {c.name: c.value for c in ts.topic_configs} if version >= 6 else None)
                       for ts in req.topic_states]
        deleted: list[tuple[str, int]] = []  # partitions of deleted topics: their committed offsets go too
        if req.type == REQUEST_TYPE_FULL:
            named = {topic for topic, _id, _parts, _configs in grouped}
            for name in [t for t in cache.topics if t not in named]:
                deleted += [(name, p) for p in cache.topics[name].partitions]
                cache.remove_topic(name)
        changed_configs = []
        for topic, topic_id, parts, configs in grouped:
            for ps in parts:
                if ps.leader == -2:  # LeaderDuringDelete: the topic is being deleted
                    if cache.contains_partition(topic, ps.partition_index):
                        deleted.append((topic, ps.partition_index))
                    cache.remove_partition(topic, ps.partition_index)
                    continue
                cache.update_partition(topic, topic_id, PartitionInfo(
                    ps.partition_index, ps.leader, ps.leader_epoch, list(ps.replicas), list(ps.isr),
                    list(ps.offline_replicas), ps.zk_version))
            info = cache.topics.get(topic)
            if info is not None and configs is not None and configs != info.configs:
                info.configs = configs
                changed_configs.append(topic)
        if deleted and self.group_coordinator is not None:
            self.group_coordinator.on_partitions_deleted(deleted)
        if changed_configs:
            log.info("topic config overrides changed: %s", ", ".join(
                f"{t} {cache.topics[t].configs or '{}'}" for t in changed_configs))
            rm.topic_configs_changed(changed_configs)
        self.send(ctx, api, {"error_code": ErrorCode.NONE})
        cache.updated()

    def handle_stop_replica_request(self, ctx: "RequestContext") -> None:
        self._in_controller_order(ctx, self._stop_replica)

    def _stop_replica(self, ctx: "RequestContext") -> None:
        api = APIS[ApiKey.STOP_REPLICA]
        req = self.parse(ctx, api)
        version = ctx.api_version
        if version == 0:
            items = [(p.topic_name, p.partition_index, -1, req.delete_partitions) for p in req.ungrouped_partitions]
        elif version <= 2:
            items = [(t.name, p, -1, req.delete_partitions) for t in req.topics for p in t.partition_indexes]
        else:
            items = [(t.topic_name, p.partition_index, p.leader_epoch, p.delete_partition)
                     for t in req.topic_states for p in t.partition_states]
        rm = self.replica_manager
        if self._cluster_action_denied(ctx):
            error = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            results = {(t, p): error for t, p, _e, _d in items}
        elif req.controller_epoch < rm.controller_epoch:
            log.warning("ignoring StopReplica from controller %d with stale epoch %d (current %d)",
                        req.controller_id, req.controller_epoch, rm.controller_epoch)
            error = ErrorCode.STALE_CONTROLLER_EPOCH
            results = {(t, p): error for t, p, _e, _d in items}
        elif self._broker_epoch_stale(ctx, req.broker_epoch):
            error = ErrorCode.STALE_BROKER_EPOCH
            results = {(t, p): error for t, p, _e, _d in items}
        else:
            error, results = ErrorCode.NONE, {}
            rm.controller_epoch = req.controller_epoch
            for topic, p, epoch, delete in items:
                partition = rm.get_partition(topic, p)
                # A request epoch older than ours is fenced; -2 means "deleting", always allowed.
                if partition is not None and epoch not in (-1, -2) and epoch < partition.leader_epoch:
                    results[(topic, p)] = ErrorCode.FENCED_LEADER_EPOCH
                    continue
                results.update(rm.stop_replicas([(topic, p)], delete, epoch if epoch >= 0 else None))
        self.send(ctx, api, {"error_code": error, "partition_errors": [
            {"topic_name": t, "partition_index": p, "error_code": code} for (t, p), code in results.items()]})
