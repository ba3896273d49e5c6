"""Standby controllers on ZooKeeper: the election, and the metadata store in ZooKeeper.

Representation (issue 15 item 3): **the record stream**, not Kafka's ZooKeeper-era layout.
The controller's state is already defined by its metadata records and ``replay`` (loading at
start and applying a decision are one code path); keeping the same records in ZooKeeper means
the ZooKeeper store is only a different place for the same log and snapshots, and the
controller's logic does not fork into a second, translated representation (``/brokers/ids``,
``/brokers/topics/<t>/partitions/<p>/state``... would need their own reader and writer and
could drift from what the local store replays). What *is* Kafka's is the coordination:
``/controller`` (ephemeral; ``{"version":1,"brokerid":<id>,"timestamp":"<ms>"}``),
``/controller_epoch`` (the epoch as text, its zkVersion the fence) and ``/cluster/id``.

Layout under the chroot of ``zookeeper.connect``::

    /controller, /controller_epoch, /cluster/id           Kafka's paths
    /kbroker/metadata/log/<base offset:020d>-<part:04d>of<parts:04d>
    /kbroker/metadata/snapshots/<offset:020d>            {"parts": n, "epoch": e, "records": k}, written last
    /kbroker/metadata/snapshot-data/<offset:020d>-<part:04d>of<parts:04d>

A log entry is one appended batch: the same RecordBatch v2 bytes the local store writes
(records in ApiMessageAndVersion framing, partition leader epoch = controller epoch),
zlib-compressed, and cut into parts of at most PART_BYTES (512 KiB) so that no znode comes
near ZooKeeper's 1 MB limit (jute.maxbuffer); 10,000 partitions of RF 3 are ~1 MB of
records and a few hundred KiB compressed. Snapshots are the same, under a marker created
after all their parts.

Fencing (Kafka's controller-epoch zkVersion check): winning is one transaction — create the
ephemeral ``/controller`` and set ``/controller_epoch`` to epoch+1 *at the version read*. Every
later write of that controller is a transaction starting with ``check(/controller_epoch,
version)``, so once another controller has won (after this one's session ended: paused,
partitioned) every write fails, even before this one hears of it. Each part's transaction
also checks that the previous part exists, so a write lost to a dropped connection can never
be followed by a later one (no holes in the log).

Threads: kazoo runs its own; every callback from it is handed to the event loop with
``call_soon_threadsafe``, and all state here and in the controller changes on the loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from kazoo.client import KazooClient, KazooState
from kazoo.security import ACL, Id, Permissions
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

from protocol.clock import Time, TimerHandle
from protocol.messages.metadata_records import ApiMessageAndVersion, MetadataRecordType, make_record

from .metadata_store import LoadedMetadata, MetadataStoreError, decode_batches, encode_batches

log = logging.getLogger("kbroker.controller.zookeeper")

CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
CLUSTER_ID_PATH = "/cluster/id"
ROOT = "/kbroker/metadata"
LOG_PATH = f"{ROOT}/log"
SNAPSHOTS_PATH = f"{ROOT}/snapshots"
SNAPSHOT_DATA_PATH = f"{ROOT}/snapshot-data"
PART_BYTES = 512 * 1024
# What one znode costs, counted into bytes_written on top of its payload: the controller
# snapshots after metadata.log.max.record.bytes.between.snapshots bytes, which bounds the
# log's znode count (and so the size of its getChildren answer, itself under 1 MB).
ZNODE_COST = 1024
SNAPSHOTS_KEPT = 2
SNAPSHOT_BATCH_RECORDS = 2000
DELETE_OPS_PER_TXN = 200


class NotActiveError(MetadataStoreError):
    """This controller is no longer the active one: a conditional write failed, or its
    ZooKeeper session ended (or the connection was down for the session timeout)."""


def part_names(base: int, parts: int) -> list[str]:
    return [f"{base:020d}-{i:04d}of{parts:04d}" for i in range(parts)]


def parse_part_name(name: str) -> tuple[int, int, int] | None:
    """(base, part, parts) of a part's znode name, None for anything else."""
    try:
        base, rest = name.split("-", 1)
        part, parts = rest.split("of", 1)
        if len(base) == 20 and len(part) == 4 and len(parts) == 4:
            return int(base), int(part), int(parts)
    except ValueError:
        pass
    return None


def split_parts(data: bytes) -> list[bytes]:
    return [data[i:i + PART_BYTES] for i in range(0, len(data), PART_BYTES)] or [b""]


def controller_znode_body(node_id: int, now_ms: int) -> bytes:
    """Kafka's /controller JSON."""
    return json.dumps({"version": 1, "brokerid": node_id, "timestamp": str(now_ms)}).encode()


def aio(loop: asyncio.AbstractEventLoop, async_result: Any) -> asyncio.Future:
    """A kazoo IAsyncResult as an asyncio future of ``loop`` (completed on the loop)."""
    future = loop.create_future()

    def done(result: Any) -> None:
        try:
            value = result.get_nowait()
        except Exception as exc:  # noqa: BLE001 - handed over as the future's exception
            loop.call_soon_threadsafe(_set, future, None, exc)
            return
        loop.call_soon_threadsafe(_set, future, value, None)

    async_result.rawlink(done)
    return future


def _set(future: asyncio.Future, value: Any, exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(value)


def _txn_error(results: Sequence[Any]) -> BaseException | None:
    for r in results:
        if isinstance(r, BaseException) and type(r).__name__ != "RolledBackError":
            return r
    return next((r for r in results if isinstance(r, BaseException)), None)


@dataclass
class Term:
    """One won election: the epoch claimed and the zkVersion of /controller_epoch that fences it."""
    epoch: int
    epoch_zk_version: int


class ZooKeeperCoordinator:
    """The controller's ZooKeeper session: connection, cluster id, the election.

    ``campaign()`` returns a Term once this controller has won; until then it is a standby that
    watches /controller (``active_controller_id`` says who leads). ``on_not_active`` is called
    (on the loop) when the session is lost, or the connection has been down for the session
    timeout: an active controller then steps down."""

    def __init__(self, connect: str, node_id: int, time: Time, *, session_timeout_ms: int = 18000,
                 connection_timeout_ms: int | None = None, kazoo_logger: logging.Logger | None = None,
                 sasl: tuple[str, str] | None = None, set_acl: bool = False) -> None:
        """``sasl``: (username, password) to authenticate with (SASL DIGEST-MD5); ``set_acl``:
        every znode this controller creates is readable and writable by that identity alone
        (Kafka's zookeeper.set.acl; nothing is world-readable: the store holds SCRAM
        credentials and ACLs)."""
        from .zk_connect import parse_zookeeper_connect
        self.hosts, self.chroot = parse_zookeeper_connect(connect)
        self.node_id = node_id
        self.time = time
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms or session_timeout_ms
        security: dict[str, Any] = {}
        if sasl is not None:
            security["sasl_options"] = {"mechanism": "DIGEST-MD5", "username": sasl[0], "password": sasl[1]}
            if set_acl:
                security["default_acl"] = [ACL(Permissions.ALL, Id("sasl", sasl[0]))]
        self.zk = KazooClient(hosts=self.hosts, timeout=session_timeout_ms / 1000,
                              connection_retry={"max_tries": -1, "max_delay": 1.0},
                              logger=kazoo_logger or logging.getLogger("kbroker.kazoo"), **security)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.active_controller_id = -1
        self.on_not_active: Callable[[str], None] | None = None
        self._changed: asyncio.Event | None = None  # set on the loop on any watch or state change
        self.state = KazooState.LOST
        self._suspended_timer: TimerHandle | None = None
        self._closed = False

    async def start(self, new_cluster_id: str) -> str:
        """Connect, create the paths, read the cluster id (``new_cluster_id`` if the cluster has
        none yet: this controller is its first); returns the cluster id."""
        self.loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        self.zk.add_listener(self._on_state)
        await self.loop.run_in_executor(None, self._connect_blocking)
        return await self.loop.run_in_executor(None, self._cluster_id_blocking, new_cluster_id)

    def _connect_blocking(self) -> None:
        self.zk.start(timeout=self.connection_timeout_ms / 1000)
        if self.chroot:
            self.zk.ensure_path(self.chroot)
            self.zk.chroot = self.chroot
        for path in (LOG_PATH, SNAPSHOTS_PATH, SNAPSHOT_DATA_PATH, "/cluster"):
            self.zk.ensure_path(path)
        try:
            self.zk.create(CONTROLLER_EPOCH_PATH, b"0")
        except NodeExistsError:
            pass

    def _cluster_id_blocking(self, new_cluster_id: str) -> str:
        try:
            self.zk.create(CLUSTER_ID_PATH, json.dumps({"version": "1", "id": new_cluster_id}).encode())
        except NodeExistsError:
            pass
        data, _ = self.zk.get(CLUSTER_ID_PATH)
        return str(json.loads(data)["id"])

    # -- kazoo threads -> the loop ------------------------------------------------------

    def _on_state(self, state: str) -> None:
        if self.loop is not None and not self._closed:
            self.loop.call_soon_threadsafe(self._state_changed, state)

    def _state_changed(self, state: str) -> None:
        """SUSPENDED (the connection dropped; the session may live on): keep going — writes wait
        for the reconnection and fail if the session is gone — but step down once it has lasted
        the session timeout, after which another controller may have won. LOST (the session
        expired): step down at once. Reconnected in time: nothing happened."""
        self.state = state
        log.info("controller %d: ZooKeeper session %s", self.node_id, state)
        if self._suspended_timer is not None:
            self._suspended_timer.cancel()
            self._suspended_timer = None
        if state == KazooState.SUSPENDED:
            self._suspended_timer = self.time.schedule(self.session_timeout_ms, self._suspended_too_long)
        elif state == KazooState.LOST and self.on_not_active is not None:
            self.on_not_active("ZooKeeper session expired")
        self._wake()

    def _suspended_too_long(self) -> None:
        self._suspended_timer = None
        if self.state == KazooState.SUSPENDED and self.on_not_active is not None:
            self.on_not_active(f"ZooKeeper unreachable for the session timeout ({self.session_timeout_ms} ms)")

    def _watch(self, _event: Any) -> None:
        if self.loop is not None and not self._closed:
            self.loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()

    async def wait_change(self, timeout_ms: float) -> None:
        """Until a watch fires or the session's state changes, at most ``timeout_ms`` (on the injected clock)."""
        assert self._changed is not None
        timer = self.time.schedule(timeout_ms, self._wake)
        try:
            await self._changed.wait()
        finally:
            timer.cancel()
            self._changed.clear()

    # -- the election ------------------------------------------------------------------

    async def campaign(self) -> Term:
        """Wait until this controller wins /controller, bumping /controller_epoch in the same
        transaction. A /controller left by this very session (it stepped down while its session
        lived on) is deleted first, so that it too must win again with a new epoch."""
        assert self.loop is not None
        loop = self.loop
        while not self._closed:
            self._changed.clear()
            try:
                stat = await aio(loop, self.zk.exists_async(CONTROLLER_PATH, watch=self._watch))
                if stat is not None:
                    data, stat = await aio(loop, self.zk.get_async(CONTROLLER_PATH))
                    self.active_controller_id = int(json.loads(data).get("brokerid", -1))
                    if stat.ephemeralOwner == self.zk.client_id[0]:
                        log.info("controller %d: removing the /controller znode of its own earlier term", self.node_id)
                        await aio(loop, self.zk.delete_async(CONTROLLER_PATH, version=stat.version))
                        continue
                    await self.wait_change(self.session_timeout_ms)
                    continue
                data, epoch_stat = await aio(loop, self.zk.get_async(CONTROLLER_EPOCH_PATH))
                epoch = int(data) + 1
                txn = self.zk.transaction()
                txn.create(CONTROLLER_PATH, controller_znode_body(self.node_id, self.time.milliseconds()),
                           ephemeral=True)
                txn.set_data(CONTROLLER_EPOCH_PATH, str(epoch).encode(), version=epoch_stat.version)
                results = await aio(loop, txn.commit_async())
                error = _txn_error(results)
                if error is None:
                    self.active_controller_id = self.node_id
                    log.info("controller %d won the election: controller epoch %d", self.node_id, epoch)
                    return Term(epoch, results[1].version)
                if not isinstance(error, (NodeExistsError, KazooException)):
                    raise error
                log.debug("controller %d lost a race for /controller: %r", self.node_id, error)
            except (KazooException, ConnectionError) as exc:
                if self._closed:
                    break
                log.info("controller %d: ZooKeeper unavailable for the election (%r); waiting", self.node_id, exc)
                await self.wait_change(min(1000, self.session_timeout_ms))
        raise asyncio.CancelledError()

    def new_store(self, term: Term) -> "ZooKeeperMetadataStore":
        assert self.loop is not None
        return ZooKeeperMetadataStore(self.zk, self.loop, term, self.time)

    async def resign(self) -> None:
        """Give up /controller if this session still holds it (a clean stop of the active controller)."""
        assert self.loop is not None
        try:
            data, stat = await aio(self.loop, self.zk.get_async(CONTROLLER_PATH))
            if stat.ephemeralOwner == self.zk.client_id[0]:
                await aio(self.loop, self.zk.delete_async(CONTROLLER_PATH, version=stat.version))
        except (KazooException, ConnectionError, TypeError):
            pass

    def close(self) -> None:
        self._closed = True
        if self._suspended_timer is not None:
            self._suspended_timer.cancel()
        self._wake()
        try:
            self.zk.stop()
            self.zk.close()
        except KazooException:
            pass


class ZooKeeperMetadataStore:
    """The MetadataStore of one term of an active controller (see the module docstring)."""

    def __init__(self, zk: KazooClient, loop: asyncio.AbstractEventLoop, term: Term, time: Time) -> None:
        self.zk = zk
        self.loop = loop
        self.term = term
        self.time = time
        self._end = 0
        self._durable_end = 0
        self._last_part: str | None = None  # the newest part written (checked by the next write)
        self._waiters: list[tuple[int, asyncio.Future]] = []
        self._failure: BaseException | None = None
        self._bytes_written = 0
        self._entries: list[tuple[int, list[str]]] = []  # (base offset, part names) of the log, ascending
        self.load_stats: dict[str, float] = {}
        self._snapshot_lock = asyncio.Lock()

    # -- the fence ---------------------------------------------------------------------

    def _txn(self):
        txn = self.zk.transaction()
        txn.check(CONTROLLER_EPOCH_PATH, version=self.term.epoch_zk_version)
        return txn

    def fail(self, why: str) -> None:
        """This term is over: every pending and later write fails."""
        if self._failure is None:
            self._failure = NotActiveError(why)
            if why != "closed":
                log.warning("controller epoch %d: %s; nothing more is written", self.term.epoch, why)
        waiters, self._waiters = self._waiters, []
        for _offset, future in waiters:
            if not future.done():
                future.set_exception(self._failure)

    async def _commit(self, txn) -> list[Any]:
        try:
            results = await aio(self.loop, txn.commit_async())
        except (KazooException, ConnectionError) as exc:
            self.fail(f"a metadata write failed: {exc!r}")
            raise self._failure from None
        error = _txn_error(results)
        if error is not None:
            self.fail(f"a conditional metadata write failed ({type(error).__name__}: another controller's epoch, "
                      f"or a lost write before it)")
            raise self._failure
        return results

    # -- loading -----------------------------------------------------------------------

    async def load(self) -> LoadedMetadata:
        start = self.time.monotonic_ms()
        loop = self.loop
        loaded = LoadedMetadata()
        snapshot_epoch = -1
        markers = sorted(await aio(loop, self.zk.get_children_async(SNAPSHOTS_PATH)), reverse=True)
        data_names = await aio(loop, self.zk.get_children_async(SNAPSHOT_DATA_PATH))
        for marker in markers:
            try:
                offset = int(marker)
                info = json.loads((await aio(loop, self.zk.get_async(f"{SNAPSHOTS_PATH}/{marker}")))[0])
                names = part_names(offset, int(info["parts"]))
                missing = set(names) - set(data_names)
                if missing:
                    raise MetadataStoreError(f"parts missing: {sorted(missing)[:3]}")
                items = await self._read_parts(SNAPSHOT_DATA_PATH, names, f"snapshot {offset}")
            except (ValueError, KeyError, MetadataStoreError, NoNodeError) as exc:
                log.warning("ignoring metadata snapshot %s in ZooKeeper: %s", marker, exc)
                continue
            loaded.snapshot_records = [r for _o, _e, r in items]
            loaded.snapshot_offset = offset
            snapshot_epoch = max(e for _o, e, _r in items)
            break
        names = await aio(loop, self.zk.get_children_async(LOG_PATH))
        by_base: dict[int, list[tuple[int, int, str]]] = {}
        for name in names:
            parsed = parse_part_name(name)
            if parsed is not None:
                by_base.setdefault(parsed[0], []).append((parsed[1], parsed[2], name))
        last_epoch = snapshot_epoch
        end = loaded.snapshot_offset
        incomplete: list[str] = []
        self._entries = []
        bases = sorted(by_base)
        for i, base in enumerate(bases):
            parts = sorted(by_base[base])
            expected = parts[0][1]
            if [p for p, _n, _name in parts] != list(range(expected)) or any(n != expected for _p, n, _ in parts):
                incomplete += [name for _p, _n, name in parts]  # a write cut short: only ever the tail
                continue
            entry_names = [name for _p, _n, name in parts]
            self._entries.append((base, entry_names))
            self._last_part = entry_names[-1]
            if i + 1 < len(bases) and bases[i + 1] <= loaded.snapshot_offset:
                # Wholly below the snapshot (the next entry starts at or before it): not read.
                self._bytes_written += ZNODE_COST * len(entry_names)
                end = max(end, bases[i + 1])
                continue
            items = await self._read_parts(LOG_PATH, entry_names, f"log entry {base}")
            self._bytes_written += sum(ZNODE_COST for _ in entry_names)
            for offset, epoch, record in items:
                real = base + offset
                if real >= loaded.snapshot_offset:
                    loaded.log_records.append((real, record))
                last_epoch = max(last_epoch, epoch)
            end = max(end, base + len(items))
        if incomplete:
            log.warning("metadata log in ZooKeeper: removing %d parts of an unfinished write", len(incomplete))
            await self._delete(LOG_PATH, incomplete)
        loaded.last_epoch = max(last_epoch, self.term.epoch - 1)
        loaded.end_offset = end
        self._end = self._durable_end = end
        self.load_stats = {"ms": self.time.monotonic_ms() - start, "records": len(loaded.snapshot_records)
                           + len(loaded.log_records), "log_entries": len(self._entries)}
        return loaded

    async def _read_parts(self, parent: str, names: list[str], what: str) -> list[tuple[int, int, ApiMessageAndVersion]]:
        results = await asyncio.gather(*(aio(self.loop, self.zk.get_async(f"{parent}/{n}")) for n in names))
        blob = b"".join(data for data, _stat in results)
        try:
            raw = zlib.decompress(blob)
        except zlib.error as exc:
            raise MetadataStoreError(f"{what}: {exc}") from None
        items, _ = decode_batches(raw, what=what)
        return items

    async def _delete(self, parent: str, names: list[str]) -> None:
        for i in range(0, len(names), DELETE_OPS_PER_TXN):
            txn = self._txn()
            for name in names[i:i + DELETE_OPS_PER_TXN]:
                txn.delete(f"{parent}/{name}")
            await self._commit(txn)

    # -- writing -----------------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        return self._end

    @property
    def durable_end_offset(self) -> int:
        return self._durable_end

    @property
    def bytes_written(self) -> int:
        return self._bytes_written

    @property
    def last_epoch(self) -> int:
        return self.term.epoch

    async def claim_epoch(self) -> int:
        """The epoch was claimed by winning the election; mark it in the log too (a NoOpRecord)."""
        offset = self.append([make_record(MetadataRecordType.NO_OP)], self.term.epoch)
        await self.wait_durable(offset)
        log.info("controller epoch %d: metadata log continues at offset %d", self.term.epoch, offset)
        return self.term.epoch

    def append(self, records: Sequence[ApiMessageAndVersion], epoch: int) -> int:
        if self._failure is not None:
            raise self._failure
        if not records:
            raise ValueError("append needs at least one record")
        if epoch != self.term.epoch:
            raise ValueError(f"epoch {epoch} is not this term's {self.term.epoch}")
        base = self._end
        data = zlib.compress(encode_batches(records, epoch, self.time.milliseconds()), 1)
        chunks = split_parts(data)
        names = part_names(base, len(chunks))
        for name, chunk in zip(names, chunks):
            txn = self._txn()
            if self._last_part is not None:
                txn.check(f"{LOG_PATH}/{self._last_part}", -1)  # it exists
            txn.create(f"{LOG_PATH}/{name}", chunk)
            self._last_part = name
            # Sent now, in order, on the one session: ZooKeeper applies them in this order.
            future = aio(self.loop, txn.commit_async())
            if name == names[-1]:
                last = base + len(records) - 1
                future.add_done_callback(lambda f, last=last: self._written(f, last))
            else:
                future.add_done_callback(lambda f: self._written(f, None))
        self._entries.append((base, names))
        self._end = base + len(records)
        self._bytes_written += len(data) + ZNODE_COST * len(names)
        return self._end - 1

    def _written(self, future: asyncio.Future, last: int | None) -> None:
        exc = future.exception() if not future.cancelled() else asyncio.CancelledError()
        error = exc if exc is not None else _txn_error(future.result())
        if error is not None:
            self.fail(f"a conditional metadata write failed ({type(error).__name__})")
            return
        if last is not None and self._failure is None:
            self._durable_end = max(self._durable_end, last + 1)
            still = []
            for offset, waiter in self._waiters:
                if offset < self._durable_end:
                    if not waiter.done():
                        waiter.set_result(offset)
                else:
                    still.append((offset, waiter))
            self._waiters = still

    def wait_durable(self, offset: int) -> asyncio.Future:
        future = self.loop.create_future()
        if self._failure is not None:
            future.set_exception(self._failure)
        elif offset < self._durable_end:
            future.set_result(offset)
        else:
            self._waiters.append((offset, future))
        return future

    # -- snapshots ---------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        """Offsets of the complete snapshots in ZooKeeper, ascending (blocking: for tests and tools)."""
        return sorted(int(m) for m in self.zk.get_children(SNAPSHOTS_PATH))

    async def snapshot(self, records: Sequence[ApiMessageAndVersion], offset: int, epoch: int) -> None:
        async with self._snapshot_lock:  # one at a time: each compacts what the one before left
            await self._snapshot(records, offset, epoch)

    async def _snapshot(self, records: Sequence[ApiMessageAndVersion], offset: int, epoch: int) -> None:
        if offset > self._durable_end:
            raise ValueError(f"snapshot at {offset} is beyond the durable end {self._durable_end}")
        if not records:
            raise ValueError("a snapshot needs at least one record")
        data = zlib.compress(encode_batches(records, epoch, self.time.milliseconds(), SNAPSHOT_BATCH_RECORDS), 1)
        chunks = split_parts(data)
        names = part_names(offset, len(chunks))
        existing = set(await aio(self.loop, self.zk.get_children_async(SNAPSHOT_DATA_PATH)))
        stale = [n for n in existing if (p := parse_part_name(n)) is not None and p[0] == offset]
        if stale:  # an earlier attempt at the same offset that never got its marker
            await self._delete(SNAPSHOT_DATA_PATH, stale)
        for name, chunk in zip(names, chunks):
            txn = self._txn()
            txn.create(f"{SNAPSHOT_DATA_PATH}/{name}", chunk)
            await self._commit(txn)
        txn = self._txn()
        txn.create(f"{SNAPSHOTS_PATH}/{offset:020d}", json.dumps(
            {"parts": len(chunks), "epoch": epoch, "records": len(records)}).encode())
        await self._commit(txn)
        await self._compact()
        log.info("metadata snapshot in ZooKeeper at offset %d (%d records, %d bytes compressed in %d znodes)", offset,
                 len(records), len(data), len(chunks))

    async def _compact(self) -> None:
        """Keep the two newest snapshots; delete older ones, and log entries wholly below the older kept one."""
        markers = sorted(int(m) for m in await aio(self.loop, self.zk.get_children_async(SNAPSHOTS_PATH)))
        kept = markers[-SNAPSHOTS_KEPT:]
        old = markers[:-SNAPSHOTS_KEPT]
        if old:
            data_names = await aio(self.loop, self.zk.get_children_async(SNAPSHOT_DATA_PATH))
            old_set = set(old)
            await self._delete(SNAPSHOT_DATA_PATH, [n for n in data_names if (p := parse_part_name(n)) is not None
                                                    and p[0] in old_set])
            await self._delete(SNAPSHOTS_PATH, [f"{o:020d}" for o in old])
        floor = kept[0]
        doomed: list[str] = []
        keep_from = 0
        for i, (base, names) in enumerate(self._entries):
            nxt = self._entries[i + 1][0] if i + 1 < len(self._entries) else self._end
            if nxt <= floor and nxt <= self._durable_end and i + 1 < len(self._entries):
                doomed += names
                keep_from = i + 1
            else:
                break
        if doomed:
            await self._delete(LOG_PATH, doomed)
            self._entries = self._entries[keep_from:]

    def close(self) -> None:
        self.fail("closed")
