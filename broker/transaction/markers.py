"""TransactionMarkerChannelManager: the coordinator's COMMIT/ABORT markers to partition leaders.

A transaction's markers go to the current leader of each of its partitions, as this broker's
metadata shows it: the partitions this broker leads are written directly (the same
``ReplicaManager.append_txn_markers`` WriteTxnMarkers uses), the others with WriteTxnMarkers
(27) over the inter-broker listener, one connection per broker, opened through the injected
``Network``. A partition whose marker fails retriably (no leader, a changed leader, a lost
connection, NOT_ENOUGH_REPLICAS, a timeout) is retried after ``retry_backoff_ms`` with the
leader looked up again, until acknowledged; a partition that no longer exists (its topic was
deleted) counts as done, as in Kafka. ``done`` runs once every partition is acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Callable

from protocol.api_keys import ApiKey
from protocol.client import BrokerConnection, Network
from protocol.clock import Time
from protocol.errors import ErrorCode

from .coordinator import TxnMarkerSender

if TYPE_CHECKING:
    from ..metadata_cache import MetadataCache
    from ..replica_manager import ReplicaManager

log = logging.getLogger("kbroker.transaction.markers")

# Errors after which the marker is sent again (the leader looked up anew); anything else is
# logged and retried as well: a marker must land (Kafka retries all but a deleted partition).
_GONE = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,)


class TxnMarkerChannel(TxnMarkerSender):
    def __init__(self, *, broker_id: int, time: Time, metadata_cache: "MetadataCache",
                 replica_manager: "ReplicaManager", network: Network, listener_name: str,
                 request_timeout_ms: int = 30000, retry_backoff_ms: int = 100,
                 on_local_markers: Callable[[int, bool, list[tuple[str, int]]], None] | None = None) -> None:
        self.broker_id = broker_id
        self.time = time
        self.metadata_cache = metadata_cache
        self.replica_manager = replica_manager
        self.network = network
        self.listener_name = listener_name
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.on_local_markers = on_local_markers
        self._connections: dict[int, BrokerConnection] = {}
        self._connect_locks: dict[int, asyncio.Lock] = {}
        self._connect_queued: dict[int, int] = {}  # callers waiting for or holding the lock, per broker
        self._connecting: dict[int, asyncio.Future] = {}
        self._tasks: dict[asyncio.Task, None] = {}  # (not a set: cancelled in a replayable order)
        self._closed = False
        self.pending = 0  # markers not yet acknowledged (a gauge)

    def close(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()

    def send(self, transactional_id: str, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int,
             partitions: frozenset[tuple[str, int]], done: Callable[[], None]) -> None:
        remaining = set(partitions)
        self.pending += len(remaining)
        if not remaining:
            done()
            return

        def acked(tp: tuple[str, int]) -> None:
            if tp in remaining:
                remaining.discard(tp)
                self.pending -= 1
                if not remaining:
                    done()

        self._attempt(transactional_id, producer_id, epoch, commit, coordinator_epoch, set(remaining), acked)

    def _attempt(self, tid: str, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int,
                 partitions: set[tuple[str, int]], acked: Callable[[tuple[str, int]], None]) -> None:
        if self._closed:
            return
        by_leader: dict[int, list[tuple[str, int]]] = {}
        retry: list[tuple[str, int]] = []
        cache = self.metadata_cache
        for tp in sorted(partitions):  # (a set of str keys: its order would follow PYTHONHASHSEED)
            info = cache.topics.get(tp[0])
            if info is None:
                acked(tp)  # the topic is gone: nothing to mark
                continue
            state = info.partitions.get(tp[1])
            if state is None:
                acked(tp)
                continue
            if state.leader < 0:
                retry.append(tp)
            else:
                by_leader.setdefault(state.leader, []).append(tp)

        def failed(tps: list[tuple[str, int]]) -> None:
            if tps and not self._closed:
                self.time.schedule(self.retry_backoff_ms, lambda: self._attempt(
                    tid, producer_id, epoch, commit, coordinator_epoch, set(tps), acked))

        failed(retry)
        for leader, tps in by_leader.items():
            def answered(results: list[tuple[str, int, int]], tps: list[tuple[str, int]] = tps) -> None:
                again = []
                for topic, index, error in results:
                    if error == ErrorCode.NONE or error in _GONE:
                        acked((topic, index))
                    else:
                        again.append((topic, index))
                        log.debug("marker for %r (producer %d) on %s-%d: %s; retrying", tid, producer_id, topic, index,
                                  ErrorCode(error).name if error in ErrorCode._value2member_map_ else error)
                answered_set = {(t, i) for t, i, _e in results}
                again.extend(tp for tp in tps if tp not in answered_set)
                failed(again)

            marker = (producer_id, epoch, commit, coordinator_epoch, tps)
            if leader == self.broker_id:
                self._write_local(marker, answered)
            else:
                self._spawn(self._write_remote(leader, marker, answered))

    def _write_local(self, marker, answered: Callable[[list[tuple[str, int, int]]], None]) -> None:
        producer_id, _epoch, commit, _ce, tps = marker

        def done(results: list) -> None:
            rows = results[0][1]
            if self.on_local_markers is not None:
                ok = [(t, p) for t, p, e in rows if e == ErrorCode.NONE]
                if ok:
                    self.on_local_markers(producer_id, commit, ok)
            answered(rows)
        self.replica_manager.append_txn_markers(self.request_timeout_ms, [marker], done)

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks[task] = None
        task.add_done_callback(self._tasks.pop)

    async def connection(self, broker_id: int) -> BrokerConnection:
        """The connection to ``broker_id`` over the inter-broker listener (the KIP-890 verifier shares it)."""
        conn = self._connections.get(broker_id)
        if conn is not None and conn.connected and not self._connect_queued.get(broker_id):
            return conn
        # one connect at a time per broker: callers arriving meanwhile (verifications of pipelined
        # produce requests) wait for it and share it, instead of each opening one and the last
        # closing the others' under their requests in flight; and in the order they came: while
        # any wait, a newcomer queues behind them even if the connection is open by now (else its
        # request would reach the coordinator before theirs)
        lock = self._connect_locks.setdefault(broker_id, asyncio.Lock())
        self._connect_queued[broker_id] = self._connect_queued.get(broker_id, 0) + 1
        try:
            async with lock:
                return await self._connect(broker_id)
        finally:
            self._connect_queued[broker_id] -= 1

    async def _connect(self, broker_id: int) -> BrokerConnection:
        """``connection``'s work under the broker's lock: the open connection, or a new one."""
        conn = self._connections.get(broker_id)
        if conn is not None and conn.connected:
            return conn
        endpoint = self.metadata_cache.broker_endpoint(broker_id, self.listener_name)
        if endpoint is None:
            raise ConnectionError(f"broker {broker_id} has no {self.listener_name} endpoint")
        conn = BrokerConnection(endpoint.host, endpoint.port, client_id=f"broker-{self.broker_id}-txn-markers",
                                network=self.network, time=self.time, request_timeout_ms=self.request_timeout_ms)
        await conn.connect()
        old = self._connections.get(broker_id)
        if old is not None and old is not conn:
            old.close()
        self._connections[broker_id] = conn
        return conn

    async def _write_remote(self, broker_id: int, marker, answered: Callable[[list[tuple[str, int, int]]], None]) -> None:
        producer_id, epoch, commit, coordinator_epoch, tps = marker
        topics: dict[str, list[int]] = {}
        for t, p in tps:
            topics.setdefault(t, []).append(p)
        try:
            conn = await self.connection(broker_id)
            response = await conn.request(ApiKey.WRITE_TXN_MARKERS, {"markers": [{
                "producer_id": producer_id, "producer_epoch": epoch, "transaction_result": commit,
                "coordinator_epoch": coordinator_epoch,
                "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]}]})
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.info("WriteTxnMarkers to broker %d failed: %s; retrying", broker_id, exc)
            conn = self._connections.pop(broker_id, None)
            if conn is not None:
                conn.close()
            answered([])
            return
        rows = [(t.name, p.partition_index, p.error_code) for m in response.markers for t in m.topics
                for p in t.partitions]
        answered(rows)
