"""Admin requests a broker passes to the active controller (Kafka's ForwardingManager and
AutoTopicCreationManager), and waiting for their effect on this broker's metadata.

Clients may send CreateTopics, DeleteTopics, CreatePartitions, IncrementalAlterConfigs,
AlterConfigs, ElectLeaders, CreateAcls, DeleteAcls, AlterUserScramCredentials,
AlterPartitionReassignments, ListPartitionReassignments, DescribeClientQuotas, AlterClientQuotas and
UnregisterBroker to any broker; the controller decides them. Clients do not
notice the hop:

* ``ForwardingManager.forward`` relays a request as it came (same API version, same body
  bytes) over the broker's own controller channel and relays the controller's response body
  back under the client's correlation id. A controller that cannot be reached or answers
  NOT_CONTROLLER is left for the next address of ``controller.quorum.bootstrap.servers``,
  with a backoff on the injected clock, until ``controller.socket.timeout.ms``; then every
  resource of the request gets REQUEST_TIMED_OUT (retriable), as Kafka's forwarding answers.
* ``ControllerTopicAdmin`` is the broker's ``TopicAdmin`` (what KafkaApis and the group
  coordinator use to create and delete topics): CreateTopics / DeleteTopics to the
  controller, and Metadata auto-creation, which answers LEADER_NOT_AVAILABLE for the topic
  at once and asks the controller to create it (with this broker's num.partitions and
  default.replication.factor, as Kafka's AutoTopicCreationManager does).

A successful CreateTopics, DeleteTopics or CreatePartitions is answered once this broker's
metadata cache shows the result (every new partition with a leader, and where this broker is
a replica the LeaderAndIsr applied; the topic gone), within
the request's ``timeout_ms`` — the ZooKeeper-era Kafka's DelayedCreatePartitions /
DelayedDeleteTopics — so a client that creates a topic and then asks this broker for it
finds it. What is still missing at the deadline is answered REQUEST_TIMED_OUT, as there.
``NoControllerForwarding`` and ``topic_admin.NotController`` serve a broker without a
controller (driven by a static controller): NOT_CONTROLLER.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Callable, Protocol

from protocol.api_keys import ApiKey
from protocol.client import sleep
from protocol.clock import Time, TimerHandle
from protocol.errors import ErrorCode, KafkaError, UnsupportedVersionError
from protocol.messages import APIS

from .config import validate_topic_name
from .topic_admin import NewTopic, TopicResult, TopicResultsCallback

if TYPE_CHECKING:
    from .config import KafkaConfig
    from .controller_channel import ControllerChannel
    from .metadata_cache import MetadataCache, PartitionInfo

log = logging.getLogger("kbroker.forwarding")

RETRY_BACKOFF_MS = 50
RETRY_BACKOFF_MAX_MS = 1000
# Relayed to the controller, and so advertised by brokers: only what the controller handles
# (controller/controller_apis.py; tests/compat/test_cluster_admin.py checks it).
FORWARDED_APIS = (ApiKey.CREATE_PARTITIONS, ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.ALTER_CONFIGS,
                  ApiKey.ELECT_LEADERS, ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS, ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
                  ApiKey.ALTER_PARTITION_REASSIGNMENTS, ApiKey.LIST_PARTITION_REASSIGNMENTS, ApiKey.UNREGISTER_BROKER,
                  ApiKey.DESCRIBE_CLIENT_QUOTAS, ApiKey.ALTER_CLIENT_QUOTAS)

Respond = Callable[[bytes], None]


def error_response(api_key: int, request: Any, code: int, message: str | None) -> dict:
    """The response body that gives ``code`` to every resource of ``request``."""
    if api_key == ApiKey.CREATE_TOPICS:
        return {"throttle_time_ms": 0, "topics": [{"name": t.name, "error_code": code, "error_message": message}
                                                  for t in request.topics]}
    if api_key == ApiKey.DELETE_TOPICS:
        names = list(request.topic_names) or [t.name for t in request.get("topics", [])]
        return {"throttle_time_ms": 0, "responses": [{"name": n, "error_code": code, "error_message": message}
                                                     for n in names]}
    if api_key == ApiKey.CREATE_PARTITIONS:
        return {"throttle_time_ms": 0, "results": [{"name": t.name, "error_code": code, "error_message": message}
                                                   for t in request.topics]}
    if api_key in (ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.ALTER_CONFIGS):
        return {"throttle_time_ms": 0, "responses": [
            {"error_code": code, "error_message": message, "resource_type": r.resource_type,
             "resource_name": r.resource_name} for r in request.resources]}
    if api_key == ApiKey.CREATE_ACLS:
        return {"throttle_time_ms": 0, "results": [{"error_code": code, "error_message": message}
                                                   for _c in request.creations]}
    if api_key == ApiKey.DELETE_ACLS:
        return {"throttle_time_ms": 0, "filter_results": [{"error_code": code, "error_message": message,
                                                           "matching_acls": []} for _f in request.filters]}
    if api_key == ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
        users = sorted({d.name for d in request.deletions} | {u.name for u in request.upsertions})
        return {"throttle_time_ms": 0, "results": [{"user": u, "error_code": code, "error_message": message}
                                                   for u in users]}
    if api_key == ApiKey.ALTER_PARTITION_REASSIGNMENTS:
        # Kafka answers a request-level failure (authorization, no controller) at the top level.
        return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "responses": [
            {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": code,
                                             "error_message": message} for p in t.partitions]}
            for t in request.topics]}
    if api_key == ApiKey.LIST_PARTITION_REASSIGNMENTS:
        return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "topics": []}
    if api_key == ApiKey.ALTER_CLIENT_QUOTAS:
        return {"throttle_time_ms": 0, "entries": [{"error_code": code, "error_message": message, "entity": [
            {"entity_type": e.entity_type, "entity_name": e.entity_name} for e in entry.entity]}
            for entry in request.entries]}
    if api_key == ApiKey.UNREGISTER_BROKER:
        return {"throttle_time_ms": 0, "error_code": code, "error_message": message}
    if api_key == ApiKey.DESCRIBE_CLIENT_QUOTAS:
        return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "entries": None}
    if api_key == ApiKey.ELECT_LEADERS:
        return {"throttle_time_ms": 0, "error_code": code, "replica_election_results": [
            {"topic": t.topic, "partition_result": [{"partition_id": p, "error_code": code, "error_message": message}
                                                    for p in t.partitions]}
            for t in (request.topic_partitions or [])]}
    raise ValueError(f"no error response for api key {api_key}")


class MetadataWaiters:
    """Callbacks waiting for the metadata cache to show something, each with a deadline on
    the injected clock. KafkaApis calls ``metadata_updated`` after every UpdateMetadata."""

    def __init__(self, time: Time) -> None:
        self.time = time
        self._waiters: list[tuple[Callable[[], bool], Callable[[bool], None], TimerHandle]] = []

    def wait(self, ready: Callable[[], bool], timeout_ms: float, done: Callable[[bool], None]) -> None:
        """``done(True)`` once ``ready()`` holds (now, if it already does), ``done(False)`` at the deadline."""
        if ready():
            done(True)
            return
        entry: list[Any] = []

        def expire() -> None:
            if entry and entry[0] in self._waiters:
                self._waiters.remove(entry[0])
                done(False)

        timer = self.time.schedule(max(0.0, timeout_ms), expire)
        entry.append((ready, done, timer))
        self._waiters.append(entry[0])

    def metadata_updated(self) -> None:
        if not self._waiters:
            return
        still = []
        finished = []
        for waiter in self._waiters:
            if waiter[0]():
                finished.append(waiter)
            else:
                still.append(waiter)
        self._waiters = still
        for _ready, done, timer in finished:
            timer.cancel()
            done(True)

    def close(self) -> None:
        waiters, self._waiters = self._waiters, []
        for _ready, done, timer in waiters:
            timer.cancel()
            done(False)


class Forwarding(Protocol):
    def forward(self, api_key: int, version: int, body: bytes, request: Any, respond: Respond) -> None:
        """Answer ``request`` (``body``: its encoded form) through ``respond(response body)``."""


class NoControllerForwarding:
    """A broker without a controller (driven by a static controller): NOT_CONTROLLER."""

    def forward(self, api_key: int, version: int, body: bytes, request: Any, respond: Respond) -> None:
        respond(APIS[api_key].response.build(version, error_response(
            api_key, request, ErrorCode.NOT_CONTROLLER, "this broker has no controller (controller.quorum.bootstrap.servers)")))


def _always_applied(topic: str, info: "PartitionInfo") -> bool:
    return True


class ForwardingManager:
    def __init__(self, channel: "ControllerChannel", *, time: Time, metadata_cache: "MetadataCache",
                 waiters: MetadataWaiters, timeout_ms: int = 30000,
                 applied: Callable[[str, "PartitionInfo"], bool] = _always_applied) -> None:
        """``applied(topic, partition info)``: whether this broker already acts on that state
        (ReplicaManager.has_applied: the LeaderAndIsr behind it arrived, where it is a replica)."""
        self.channel = channel
        self.time = time
        self.metadata_cache = metadata_cache
        self.waiters = waiters
        self.timeout_ms = timeout_ms
        self.applied = applied
        self._tasks: dict[asyncio.Task[None], None] = {}  # (not a set: cancelled in a replayable order)

    def spawn(self, coro: Any, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks[task] = None
        task.add_done_callback(self._tasks.pop)

    async def call(self, attempt: Callable[[], Any]) -> Any:
        """``await attempt()`` until it succeeds, retrying failures to reach the active
        controller with backoff until ``timeout_ms``; raises the last failure."""
        deadline = self.time.monotonic_ms() + self.timeout_ms
        backoff = RETRY_BACKOFF_MS
        while True:
            try:
                return await attempt()
            except UnsupportedVersionError:
                raise
            except (KafkaError, OSError) as exc:
                if self.time.monotonic_ms() + backoff >= deadline:
                    raise
                log.debug("controller not reached (%s); retrying in %d ms", exc, backoff)
            await sleep(self.time, backoff)
            backoff = min(backoff * 2, RETRY_BACKOFF_MAX_MS)

    # -- relaying --------------------------------------------------------------------------
    def forward(self, api_key: int, version: int, body: bytes, request: Any, respond: Respond) -> None:
        self.spawn(self._forward(api_key, version, body, request, respond), f"forward-{APIS[api_key].name}")

    async def _forward(self, api_key: int, version: int, body: bytes, request: Any, respond: Respond) -> None:
        api = APIS[api_key]
        asked_at = self.time.monotonic_ms()
        try:
            data = bytes(await self.call(lambda: self.channel.send_raw(api_key, version, body)))
        except asyncio.CancelledError:
            raise
        except UnsupportedVersionError as exc:
            log.warning("cannot forward %s v%d: %s", api.name, version, exc)
            respond(api.response.build(version, error_response(api_key, request, ErrorCode.UNSUPPORTED_VERSION,
                                                               str(exc))))
            return
        except Exception as exc:
            log.warning("%s not forwarded: no active controller answered within %d ms (%s)", api.name,
                        self.timeout_ms, exc)
            respond(api.response.build(version, error_response(api_key, request, ErrorCode.REQUEST_TIMED_OUT,
                                                               "no active controller answered")))
            return
        if api_key == ApiKey.CREATE_PARTITIONS and not request.validate_only and request.timeout_ms > 0:
            response = api.response.parse(version, data)
            grown = {r.name for r in response.results if r.error_code == ErrorCode.NONE}
            counts = {t.name: t.count for t in request.topics if t.name in grown}
            if counts:
                def ready() -> bool:
                    return all(self._partitions_led(name) >= count for name, count in counts.items())

                def done(ok: bool) -> None:
                    if ok:
                        respond(data)
                        return
                    for r in response.results:
                        if r.name in counts and self._partitions_led(r.name) < counts[r.name]:
                            r.error_code, r.error_message = ErrorCode.REQUEST_TIMED_OUT, None
                    respond(api.response.build(version, response))
                left_ms = max(0, request.timeout_ms - int(self.time.monotonic_ms() - asked_at))
                self.waiters.wait(ready, left_ms, done)
                return
        respond(data)

    def _partitions_led(self, topic: str) -> int:
        """Partitions of ``topic`` this broker knows with a leader and acts on (all of them, or 0)."""
        info = self.metadata_cache.topics.get(topic)
        if info is None or any(p.leader < 0 or not self.applied(topic, p) for p in info.partitions.values()):
            return 0
        return len(info.partitions)

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()


class ControllerTopicAdmin:
    """The TopicAdmin of a broker with a controller: topics are created and deleted there."""

    def __init__(self, forwarding: ForwardingManager, config: "KafkaConfig", metadata_cache: "MetadataCache") -> None:
        self.forwarding = forwarding
        self.channel = forwarding.channel
        self.config = config
        self.metadata_cache = metadata_cache
        self.waiters = forwarding.waiters
        self._auto_creating: set[str] = set()

    async def _ask(self, api_key: int, body: dict, count: int, callback: TopicResultsCallback) -> Any:
        """The controller's response, or None after answering all ``count`` topics
        REQUEST_TIMED_OUT (no active controller answered in time)."""
        try:
            return await self.forwarding.call(lambda: self.channel.send(api_key, body))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("%s not answered by the controller: %s", APIS[api_key].name, exc)
            callback([(ErrorCode.REQUEST_TIMED_OUT, "no active controller answered") for _ in range(count)])
            return None

    # -- CreateTopics ----------------------------------------------------------------------
    def create_topics(self, topics: list[NewTopic], validate_only: bool, callback: TopicResultsCallback,
                      timeout_ms: int = 30000) -> None:
        if not topics:
            callback([])
            return
        self.forwarding.spawn(self._create(topics, validate_only, callback, timeout_ms), "create-topics")

    async def _create(self, topics: list[NewTopic], validate_only: bool, callback: TopicResultsCallback,
                      timeout_ms: int) -> None:
        body = {"topics": [{"name": t.name, "num_partitions": t.num_partitions,
                            "replication_factor": t.replication_factor,
                            "assignments": [{"partition_index": p, "broker_ids": r} for p, r in sorted(t.assignments.items())],
                            "configs": [{"name": k, "value": v} for k, v in t.configs.items()]} for t in topics],
                "timeout_ms": timeout_ms, "validate_only": validate_only}
        asked_at = self.forwarding.time.monotonic_ms()
        response = await self._ask(ApiKey.CREATE_TOPICS, body, len(topics), callback)
        if response is None:
            return
        # The controller may have spent some of timeout_ms waiting for the new replicas.
        left_ms = max(0, timeout_ms - int(self.forwarding.time.monotonic_ms() - asked_at))
        by_name = {r.name: (r.error_code, r.get("error_message")) for r in response.topics}
        results: list[TopicResult] = [by_name.get(t.name, (ErrorCode.UNKNOWN_SERVER_ERROR, "no answer for the topic"))
                                      for t in topics]
        created = {t.name: (len(t.assignments) or t.num_partitions) for t, (code, _m) in zip(topics, results)
                   if code == ErrorCode.NONE}
        if validate_only or timeout_ms <= 0 or not created:
            callback(results)
            return

        def ready() -> bool:
            return all(self._topic_ready(name, n) for name, n in created.items())

        def done(ok: bool) -> None:
            out = list(results)
            if not ok:
                out = [(ErrorCode.REQUEST_TIMED_OUT, "the topic was created; its metadata has not reached this broker")
                       if t.name in created and not self._topic_ready(t.name, created[t.name]) else r
                       for t, r in zip(topics, out)]
            callback(out)
        self.waiters.wait(ready, left_ms, done)

    def _topic_ready(self, name: str, partitions: int) -> bool:
        info = self.metadata_cache.topics.get(name)
        if info is None or not info.partitions or (partitions > 0 and len(info.partitions) < partitions):
            return False
        return all(p.leader >= 0 and self.forwarding.applied(name, p) for p in info.partitions.values())

    # -- DeleteTopics ----------------------------------------------------------------------
    def delete_topics(self, names: list[str], callback: TopicResultsCallback, timeout_ms: int = 30000) -> None:
        if not names:
            callback([])
            return
        self.forwarding.spawn(self._delete(names, callback, timeout_ms), "delete-topics")

    async def _delete(self, names: list[str], callback: TopicResultsCallback, timeout_ms: int) -> None:
        body = {"topic_names": list(names), "timeout_ms": timeout_ms}
        response = await self._ask(ApiKey.DELETE_TOPICS, body, len(names), callback)
        if response is None:
            return
        by_name = {r.name: (r.error_code, r.get("error_message")) for r in response.responses}
        results: list[TopicResult] = [by_name.get(n, (ErrorCode.UNKNOWN_SERVER_ERROR, "no answer for the topic"))
                                      for n in names]
        deleted = [n for n, (code, _m) in zip(names, results) if code == ErrorCode.NONE]
        if timeout_ms <= 0 or not deleted:
            callback(results)
            return

        def ready() -> bool:
            return not any(self.metadata_cache.contains_topic(n) for n in deleted)

        def done(ok: bool) -> None:
            out = list(results)
            if not ok:
                out = [(ErrorCode.REQUEST_TIMED_OUT, "the topic was deleted; this broker has not heard yet")
                       if n in deleted and self.metadata_cache.contains_topic(n) else r for n, r in zip(names, out)]
            callback(out)
        self.waiters.wait(ready, timeout_ms, done)

    # -- auto-creation (Kafka's AutoTopicCreationManager) ----------------------------------
    def maybe_auto_create_topic(self, name: str, allow: bool) -> int:
        if validate_topic_name(name) is not None:
            return ErrorCode.INVALID_TOPIC_EXCEPTION
        if not (allow and self.config["auto.create.topics.enable"]):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if name not in self._auto_creating:
            self._auto_creating.add(name)
            topic = NewTopic(name, self.config["num.partitions"], self.config["default.replication.factor"])

            def created(results: list[TopicResult]) -> None:
                self._auto_creating.discard(name)
                code, message = results[0]
                if code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                    log.warning("auto-creating topic %r failed: %s %s", name, _error_name(code), message or "")
                else:
                    log.info("auto-created topic %s", name)
            self.create_topics([topic], False, created, timeout_ms=0)
        return ErrorCode.LEADER_NOT_AVAILABLE


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
