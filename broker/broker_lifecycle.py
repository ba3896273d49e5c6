"""BrokerLifecycleManager (Kafka's): a broker's registration and heartbeats with the controller.

One incarnation id per process start. The manager, driven by timers on the injected clock:

1. learns the cluster id from the controller (a Metadata request) when the broker's
   meta.properties has none yet (Kafka's ``kafka-storage format`` step, done on first contact);
2. registers (BrokerRegistration: broker id, cluster id, incarnation id, listeners, rack) and
   gets a broker epoch; a registered broker starts FENCED;
3. heartbeats (BrokerHeartbeat) — every 10 ms until the broker is first unfenced, as Kafka
   does while STARTING, so a node comes up in tens of milliseconds, then every
   ``broker.heartbeat.interval.ms``. The controller unfences the broker once it has
   acknowledged the full state sent to it (``is_caught_up``);
4. on controlled shutdown (SIGTERM), heartbeats with ``want_shut_down`` every 50 ms until the
   controller answers ``should_shut_down`` (it has moved every leadership away and the
   broker has received the LeaderAndIsr saying so). Kafka polls at the heartbeat interval
   after the first answer; kbroker keeps 50 ms, so a SIGTERM takes milliseconds, not seconds.

States are Kafka's BrokerState: NOT_RUNNING → STARTING (registering, catching up) → RECOVERY
(caught up, not yet unfenced) → RUNNING → PENDING_CONTROLLED_SHUTDOWN → SHUTTING_DOWN.

A failed exchange (no controller reachable, an error answer) is retried after the heartbeat
interval (Kafka's scheduleNextCommunicationAfterFailure); the controller channel has by then
moved on to the next address of ``controller.quorum.bootstrap.servers``. One request is in
flight at a time.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from protocol.api_keys import ApiKey
from protocol.clock import Time, TimerHandle
from protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("kbroker.lifecycle")

STARTUP_HEARTBEAT_MS = 10      # Kafka's heartbeat cadence while STARTING
SHUTDOWN_HEARTBEAT_MS = 50     # Kafka's first PENDING_CONTROLLED_SHUTDOWN re-heartbeat (kept here throughout)
FENCED_HEARTBEAT_MS = 100     # while fenced after having run: back in the ISR sooner than the interval
SECURITY_PROTOCOL_PLAINTEXT = 0


class BrokerState(enum.IntEnum):
    """Kafka's org.apache.kafka.metadata.BrokerState (same values)."""

    NOT_RUNNING = 0
    STARTING = 1
    RECOVERY = 2
    RUNNING = 3
    PENDING_CONTROLLED_SHUTDOWN = 6
    SHUTTING_DOWN = 7


class ControllerSender(Protocol):
    """What the manager needs of a ControllerChannel (tests give it a scripted one)."""

    async def send(self, api_key: int, body: dict, version: int | None = None,
                   max_version: int | None = None) -> Any: ...


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int
    security_protocol: int = SECURITY_PROTOCOL_PLAINTEXT


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


class BrokerLifecycleManager:
    def __init__(self, *, broker_id: int, time: Time, channel: ControllerSender, listeners: list[Listener],
                 rack: str | None = None, cluster_id: str | None = None, heartbeat_interval_ms: int = 2000,
                 on_cluster_id: Callable[[str], None] | None = None,
                 incarnation_id: uuid.UUID | None = None, on_registered: Callable[[], None] | None = None,
                 log_dir_usage: Callable[[], list[dict]] | None = None) -> None:
        """``log_dir_usage``: each log dir's {total_bytes, used_bytes}, sent with every
        heartbeat (a tagged field of kbroker's, for the controller's partition autobalancer)."""
        self.broker_id = broker_id
        self.time = time
        self.channel = channel
        self.listeners = list(listeners)
        self.rack = rack
        self.cluster_id = cluster_id
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.on_cluster_id = on_cluster_id
        self.on_registered = on_registered  # told each time a registration is answered (the epoch is known)
        self.incarnation_id = incarnation_id or uuid.uuid4()
        self.log_dir_usage = log_dir_usage
        self.state = BrokerState.NOT_RUNNING
        self.broker_epoch = -1
        self.registered = False
        self.fenced = True
        self.caught_up = False
        loop = asyncio.get_running_loop()
        self.initial_catch_up: asyncio.Future[None] = loop.create_future()
        self.initial_unfence: asyncio.Future[None] = loop.create_future()
        self.controlled_shutdown_done: asyncio.Future[None] = loop.create_future()
        self.heartbeats_sent = 0
        self._timer: TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._in_flight = False
        self._next_immediate = False
        self._failures = 0
        self._got_shutdown_answer = False

    def __repr__(self) -> str:
        return f"<BrokerLifecycleManager broker {self.broker_id} {self.state.name} epoch {self.broker_epoch}>"

    # -- control ---------------------------------------------------------------------------
    def start(self) -> None:
        if self.state != BrokerState.NOT_RUNNING:
            return
        self.state = BrokerState.STARTING
        log.info("incarnation %s of broker %d is STARTING", self.incarnation_id, self.broker_id)
        self._schedule(0)

    def begin_controlled_shutdown(self) -> asyncio.Future[None]:
        """Ask the controller to move this broker's leaderships away; the future completes when
        it answers should_shut_down (or at once if the broker never registered)."""
        if self.state in (BrokerState.PENDING_CONTROLLED_SHUTDOWN, BrokerState.SHUTTING_DOWN):
            return self.controlled_shutdown_done
        if not self.registered:
            self._finish_controlled_shutdown("the broker never registered")
            return self.controlled_shutdown_done
        log.info("broker %d: beginning controlled shutdown", self.broker_id)
        self.state = BrokerState.PENDING_CONTROLLED_SHUTDOWN
        self._got_shutdown_answer = False
        self._schedule(0)
        return self.controlled_shutdown_done

    def close(self) -> None:
        """Stop communicating (the broker is going away)."""
        self.state = BrokerState.SHUTTING_DOWN
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is not None and not self._task.done():
            self._task.cancel()
        for future in (self.initial_catch_up, self.initial_unfence, self.controlled_shutdown_done):
            if not future.done():
                future.cancel()

    # -- scheduling ------------------------------------------------------------------------
    def _schedule(self, delay_ms: float) -> None:
        if self.state == BrokerState.SHUTTING_DOWN:
            return
        if self._in_flight:
            if delay_ms == 0:
                self._next_immediate = True  # send again as soon as the answer is in
            return
        if self._next_immediate:
            delay_ms, self._next_immediate = 0, False
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.time.schedule(delay_ms, self._communicate)

    def _communicate(self) -> None:
        self._timer = None
        if self.state == BrokerState.SHUTTING_DOWN or self._in_flight:
            return
        self._in_flight = True
        self._task = asyncio.get_running_loop().create_task(self._exchange(), name=f"broker-{self.broker_id}-lifecycle")

    async def _exchange(self) -> None:
        delay: float
        try:
            if self.cluster_id is None:
                delay = await self._learn_cluster_id()
            elif not self.registered:
                delay = await self._register()
            else:
                delay = await self._heartbeat()
            self._failures = 0
        except asyncio.CancelledError:
            self._in_flight = False
            raise
        except (KafkaError, OSError) as exc:
            self._failures += 1
            level = logging.WARNING if self._failures == 1 else logging.DEBUG
            log.log(level, "broker %d: no answer from the controller (%s); retrying in %d ms", self.broker_id, exc,
                    self.heartbeat_interval_ms)
            delay = self.heartbeat_interval_ms
        except Exception:
            log.exception("broker %d: lifecycle exchange failed", self.broker_id)
            delay = self.heartbeat_interval_ms
        self._in_flight = False
        self._schedule(delay)

    # -- the exchanges ---------------------------------------------------------------------
    async def _learn_cluster_id(self) -> float:
        response = await self.channel.send(ApiKey.METADATA, {"topics": [], "allow_auto_topic_creation": False})
        cluster_id = response.get("cluster_id")
        if not cluster_id:
            log.warning("broker %d: the controller named no cluster id", self.broker_id)
            return self.heartbeat_interval_ms
        log.info("broker %d joins cluster %s", self.broker_id, cluster_id)
        self.cluster_id = cluster_id
        if self.on_cluster_id is not None:
            self.on_cluster_id(cluster_id)
        return 0

    async def _register(self) -> float:
        response = await self.channel.send(ApiKey.BROKER_REGISTRATION, {
            "broker_id": self.broker_id, "cluster_id": self.cluster_id, "incarnation_id": self.incarnation_id,
            "listeners": [{"name": lst.name, "host": lst.host, "port": lst.port,
                           "security_protocol": lst.security_protocol} for lst in self.listeners],
            "features": [], "rack": self.rack, "is_migrating_zk_broker": False, "log_dirs": [],
            "previous_broker_epoch": -1})
        if response.error_code:
            level = logging.ERROR if response.error_code == ErrorCode.INCONSISTENT_CLUSTER_ID else logging.WARNING
            log.log(level, "broker %d: registration refused by the controller: %s", self.broker_id,
                    _error_name(response.error_code))
            return self.heartbeat_interval_ms
        self.broker_epoch = response.broker_epoch
        self.registered = True
        log.info("broker %d registered with broker epoch %d (incarnation %s)", self.broker_id, self.broker_epoch,
                 self.incarnation_id)
        if self.on_registered is not None:
            self.on_registered()
        return 0  # heartbeat at once

    async def _heartbeat(self) -> float:
        shutting_down = self.state == BrokerState.PENDING_CONTROLLED_SHUTDOWN
        self.heartbeats_sent += 1
        response = await self.channel.send(ApiKey.BROKER_HEARTBEAT, {
            "broker_id": self.broker_id, "broker_epoch": self.broker_epoch, "current_metadata_offset": 0,
            "want_fence": False, "want_shut_down": shutting_down,
            "log_dir_usage": self.log_dir_usage() if self.log_dir_usage is not None else []})
        if response.error_code:
            log.warning("broker %d: heartbeat answered %s", self.broker_id, _error_name(response.error_code))
            return self.heartbeat_interval_ms
        was_fenced = self.fenced
        self.fenced = response.is_fenced
        self.caught_up = response.is_caught_up
        if was_fenced != self.fenced and self.state == BrokerState.RUNNING:
            log.warning("broker %d is %s by the controller", self.broker_id, "fenced" if self.fenced else "unfenced")
        state = self.state
        if state == BrokerState.STARTING:
            if response.is_caught_up:
                log.info("broker %d has caught up with the controller: RECOVERY", self.broker_id)
                self.state = state = BrokerState.RECOVERY
                _complete(self.initial_catch_up)
            else:
                return STARTUP_HEARTBEAT_MS
        if state == BrokerState.RECOVERY:
            if not response.is_fenced:
                log.info("broker %d has been unfenced: RUNNING", self.broker_id)
                self.state = BrokerState.RUNNING
                _complete(self.initial_unfence)
                return self.heartbeat_interval_ms
            return STARTUP_HEARTBEAT_MS
        if state == BrokerState.PENDING_CONTROLLED_SHUTDOWN:
            if response.should_shut_down:
                self._finish_controlled_shutdown("the controller lets it shut down")
                return 0
            if not self._got_shutdown_answer:
                log.info("broker %d: waiting for the controller to move its leaderships", self.broker_id)
            self._got_shutdown_answer = True
            return SHUTDOWN_HEARTBEAT_MS
        if self.fenced:
            # Fenced while running (the session lapsed: a pause, a partition): the controller
            # resends the full state and unfences on a heartbeat after it was received.
            return min(FENCED_HEARTBEAT_MS, self.heartbeat_interval_ms)
        return self.heartbeat_interval_ms

    def _finish_controlled_shutdown(self, why: str) -> None:
        log.info("broker %d: controlled shutdown complete (%s)", self.broker_id, why)
        self.state = BrokerState.SHUTTING_DOWN
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        _complete(self.controlled_shutdown_done)


def _complete(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
