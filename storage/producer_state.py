"""Per-partition producer state for the idempotent producer (Kafka's ``ProducerStateManager``).

Theory of operation. For each producer id the partition has seen, a ``ProducerStateEntry``
holds its epoch and the ``BatchMetadata`` of its last ``NUM_BATCHES_TO_RETAIN`` (5) batches:
first/last sequence, first/last offset, max timestamp. Everything that changes the state
is in this file, and the Log drives it:

* A client's produce (``Log.append_as_leader``) asks ``analyze_client_batch`` *before*
  anything is written: a duplicate, or a working copy of the producer's entry
  (``ProducerAppendInfo``) with the batch checked and added. A failure raises and leaves
  the live state as it was. Once the batch is written, ``update`` merges the copy in.
  (``prepare_append(headers, validate=True)`` chains several batches of a producer the
  same way; the Log accepts one idempotent batch per request, as Kafka does.)
* Followers (``append_as_follower``) and loading replay batch headers with
  ``validate=False`` (Kafka's ``AppendOrigin.REPLICATION``): nothing is rejected, and a
  stale epoch is logged and taken, as the leader wrote it.
* Snapshots (``<20-digit offset>.snapshot``, Kafka's v1 binary format, see
  ``encode_snapshot``) hold the state at an offset. ``truncate_and_reload`` loads the newest
  usable one; the Log then replays the headers after it (at open, and after truncating
  its end). ``truncate_head`` follows the log start offset: as in Kafka 2.0-2.4, a producer
  whose last batch is gone is forgotten (Kafka 2.5+ keeps it, KIP-360), except while its
  transaction is open: then it keeps its last batch, whose sequence its next batch follows.
* ``remove_expired_producers`` forgets a producer with no append for
  producer.id.expiration.ms, by the broker's clock at its appends (a snapshot's producers
  count from when it was loaded). Kafka goes by the batches' max timestamps instead, which
  expires an active producer that sends old CreateTime timestamps; this is deliberate.

The rules for a client's batch, checked in this order (Kafka's
``ProducerStateEntry.findDuplicateBatch``, ``ProducerAppendInfo.checkProducerEpoch`` and
``checkSequence``, Kafka 2.5+'s rules: KIP-360)::

    the batch, against the producer's entry                  outcome
    same epoch, first and last sequence of a cached batch    duplicate: the cached offsets, nothing written
    older epoch                                              INVALID_PRODUCER_EPOCH
    newer epoch, first sequence 0                            accepted; the cache starts over
    newer epoch, any other first sequence                    OUT_OF_ORDER_SEQUENCE_NUMBER
    same epoch, first sequence = last sequence + 1           accepted (sequences wrap INT32_MAX -> 0)
    same epoch, any other first sequence                     OUT_OF_ORDER_SEQUENCE_NUMBER
    no entry, first sequence 0                               accepted; a new entry
    no entry, any other first sequence                       accepted (its batches may have gone with retention
                                                             or DeleteRecords, or it expired: Kafka 2.0-2.4
                                                             answered UNKNOWN_PRODUCER_ID, 2.5+ accepts)

Only batch headers are read; nothing here decodes records. Not thread-safe: the owning
Log's thread only.
"""

from __future__ import annotations

import bisect
import logging
import struct
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from crc32c import crc32c

from protocol.clock import Time
from protocol.errors import (InvalidProducerEpochError, InvalidTxnStateError, OutOfOrderSequenceNumberError,
                             TransactionCoordinatorFencedError)
from protocol.records import (CONTROL_ABORT, CONTROL_COMMIT, CONTROL_MASK, INT32_MAX, NO_PRODUCER_EPOCH, NO_SEQUENCE,
                              TRANSACTIONAL_MASK, BatchHeader, ControlRecord, increment_sequence)

from . import fileio
from .checkpoint import write_atomically

if TYPE_CHECKING:
    from protocol.records import Buffer

log = logging.getLogger("kbroker.storage.producer_state")

NUM_BATCHES_TO_RETAIN = 5
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1

# Snapshot v1 (Kafka's PID_SNAPSHOT_MAP_SCHEMA), big-endian. The CRC-32C covers every byte
# after the CRC field: the entry count and the entries.
_SNAPSHOT_HEADER = struct.Struct(">hIi")  # version int16, crc uint32, entry count int32
_SNAPSHOT_ENTRY = struct.Struct(
    ">q"  # ProducerId
    "h"   # Epoch
    "i"   # LastSequence            of the last batch
    "q"   # LastOffset              of the last batch
    "i"   # OffsetDelta             last offset - first offset of the last batch
    "q"   # Timestamp               max timestamp of the last batch
    "i"   # CoordinatorEpoch        of the producer's last transaction marker (-1: none)
    "q"   # CurrentTxnFirstOffset   first offset of its ongoing transaction (-1: none)
)
assert (_SNAPSHOT_HEADER.size, _SNAPSHOT_ENTRY.size) == (10, 46)
_CRC_OFFSET = 2
_CRC_FROM = 6
_U32 = struct.Struct(">I")


class CorruptSnapshotError(ValueError):
    """A snapshot file of the wrong length or version, or whose CRC does not match."""


def decrement_sequence(sequence: int, decrement: int) -> int:
    """The inverse of ``increment_sequence`` (Kafka's DefaultRecordBatch.decrementSequence)."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


@dataclass(slots=True)
class BatchMetadata:
    """One appended batch of a producer, as the duplicate check needs it."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int  # the batch's max timestamp (the append time for LogAppendTime topics)


@dataclass(slots=True)
class ProducerStateEntry:
    """One producer id's epoch and last batches (oldest first).

    ``last_append_ms`` is the broker's clock at the producer's last append (the load time
    for an entry read from a snapshot); expiration goes by it. It takes no part in
    equality: a leader and its follower hold the same state at different times.
    """

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    last_timestamp: int = -1
    last_append_ms: int = field(default=-1, compare=False)
    coordinator_epoch: int = -1  # of the last transaction marker written for it
    current_txn_first_offset: int = -1  # first offset of its ongoing transaction, -1: none

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate_batch(self, header: BatchHeader) -> BatchMetadata | None:
        """The cached batch with the same epoch and sequence range as ``header``, if any."""
        if header.producer_epoch != self.producer_epoch:
            return None
        first = header.base_sequence
        for batch in self.batches:
            if batch.first_seq == first and batch.last_seq == increment_sequence(first, header.last_offset_delta):
                return batch
        return None

    def update(self, newer: ProducerAppendInfo, now_ms: int) -> None:
        """Merge a working copy (Kafka's ProducerStateEntry.update)."""
        if newer.producer_epoch != self.producer_epoch:
            _start_epoch(self, newer.producer_epoch)
        self.batches.extend(newer.batches)  # the deque's maxlen drops the oldest
        self.last_timestamp = newer.last_timestamp
        self.last_append_ms = now_ms
        self.coordinator_epoch = newer.coordinator_epoch
        self.current_txn_first_offset = newer.current_txn_first_offset


def _start_epoch(state: ProducerStateEntry | ProducerAppendInfo, epoch: int) -> None:
    """Kafka's maybeUpdateProducerEpoch: a different epoch starts over, the cached batches
    belong to the old one."""
    if epoch != state.producer_epoch:
        state.batches.clear()
        state.producer_epoch = epoch


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction ended by a marker: its producer, first offset (the marker's own when the
    producer wrote nothing in it here), the marker's offset, and whether it aborted."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class ProducerAppendInfo:
    """The working copy of one producer's state during one append (Kafka's ProducerAppendInfo).

    It starts with the current epoch and no batches; ``append`` checks each batch against
    it (falling back to ``current`` for the last sequence) and adds it. With ``validate``
    False (replication, loading) nothing is rejected and a stale epoch is only logged.
    A transactional batch starts the producer's transaction when none is ongoing
    (``started_txn``); a marker ends it (``completed_txns``).
    """

    __slots__ = ("partition", "producer_id", "current", "validate", "producer_epoch", "batches", "last_timestamp",
                 "coordinator_epoch", "current_txn_first_offset", "started_txn", "completed_txns")

    def __init__(self, partition: str, producer_id: int, current: ProducerStateEntry | None, validate: bool) -> None:
        self.partition = partition
        self.producer_id = producer_id
        self.current = current
        self.validate = validate
        self.producer_epoch = NO_PRODUCER_EPOCH if current is None else current.producer_epoch
        self.last_timestamp = -1 if current is None else current.last_timestamp
        self.coordinator_epoch = -1 if current is None else current.coordinator_epoch
        self.current_txn_first_offset = -1 if current is None else current.current_txn_first_offset
        self.batches: deque[BatchMetadata] = deque(maxlen=NUM_BATCHES_TO_RETAIN)
        self.started_txn = -1  # first offset of a transaction this append started
        self.completed_txns: list[CompletedTxn] = []

    def append(self, header: BatchHeader, control: ControlRecord | None = None) -> None:
        epoch = header.producer_epoch
        if epoch < self.producer_epoch:
            self._stale_epoch(epoch, header.base_offset)
        if header.attributes & CONTROL_MASK:
            # A transaction marker (the coordinator's, through WriteTxnMarkers, or replicated:
            # clients may not write one) moves the epoch on but is no data batch.
            self.append_end_txn_marker(header, control)
            return
        first_seq = header.base_sequence
        last_seq = increment_sequence(first_seq, header.last_offset_delta)
        if self.validate and first_seq != NO_SEQUENCE:
            # (a batch without a sequence: the coordinator's own, AppendOrigin.COORDINATOR; a
            # client's is refused before, INVALID_RECORD)
            self._check_sequence(epoch, first_seq, header.base_offset)
        if epoch != self.producer_epoch:
            _start_epoch(self, epoch)
        base_offset = header.base_offset
        if header.attributes & TRANSACTIONAL_MASK:
            if self.current_txn_first_offset < 0:
                self.current_txn_first_offset = self.started_txn = base_offset
        elif self.validate and self.current_txn_first_offset >= 0:
            raise InvalidTxnStateError(f"{self.partition}: expected a transactional write from producer "
                                       f"{self.producer_id} at offset {base_offset}: its transaction is ongoing")
        self.batches.append(BatchMetadata(first_seq, last_seq, base_offset, base_offset + header.last_offset_delta,
                                          header.max_timestamp))
        self.last_timestamp = header.max_timestamp

    def append_end_txn_marker(self, header: BatchHeader, control: ControlRecord | None) -> None:
        """Kafka's appendEndTxnMarker: an older coordinator epoch than the last marker's is
        fenced (TRANSACTION_COORDINATOR_FENCED) when validating."""
        epoch = header.producer_epoch
        if control is None or control.type not in (CONTROL_ABORT, CONTROL_COMMIT):
            _start_epoch(self, epoch)
            self.last_timestamp = header.max_timestamp
            return
        if self.validate and control.coordinator_epoch < self.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"{self.partition}: marker for producer {self.producer_id} from coordinator epoch "
                f"{control.coordinator_epoch}, older than {self.coordinator_epoch}")
        _start_epoch(self, epoch)
        first = self.current_txn_first_offset if self.current_txn_first_offset >= 0 else header.base_offset
        self.completed_txns.append(CompletedTxn(self.producer_id, first, header.base_offset,
                                                control.type == CONTROL_ABORT))
        self.current_txn_first_offset = -1
        if self.started_txn >= 0:
            self.started_txn = -1
        self.coordinator_epoch = control.coordinator_epoch
        self.last_timestamp = header.max_timestamp

    def _stale_epoch(self, epoch: int, offset: int) -> None:
        message = (f"{self.partition}: epoch {epoch} of producer {self.producer_id} at offset {offset} is older than "
                   f"its last seen epoch {self.producer_epoch}")
        if self.validate:
            raise InvalidProducerEpochError(message)
        log.warning("%s", message)

    def _check_sequence(self, epoch: int, first_seq: int, offset: int) -> None:
        if epoch != self.producer_epoch:
            if first_seq != 0:
                if self.producer_epoch != NO_PRODUCER_EPOCH:
                    raise OutOfOrderSequenceNumberError(
                        f"{self.partition}: producer {self.producer_id} at offset {offset}: a new epoch {epoch} must "
                        f"start at sequence 0, not {first_seq} (current epoch {self.producer_epoch})")
                # no state of this producer (its batches went with retention or DeleteRecords, or it
                # expired): Kafka 2.5+ accepts any sequence (KIP-360), where 2.0-2.4 answered
                # UNKNOWN_PRODUCER_ID, which made the client renumber and resend (duplicates)
            return
        if self.batches:
            last_seq = self.batches[-1].last_seq
        elif self.current is not None and epoch == self.current.producer_epoch:
            last_seq = self.current.last_seq
        else:
            last_seq = NO_SEQUENCE
        if first_seq != increment_sequence(last_seq, 1):
            raise OutOfOrderSequenceNumberError(
                f"{self.partition}: producer {self.producer_id} at offset {offset}: sequence {first_seq}, expected "
                f"{increment_sequence(last_seq, 1)}")


# -- snapshot files -------------------------------------------------------------------------

def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """The v1 snapshot of ``entries``: version, CRC, count, then one 46-byte entry each.

    Only each producer's last batch is stored (as Kafka does), so after a reload the
    duplicate check knows that one until new batches arrive.
    """
    entries = list(entries)
    size = _SNAPSHOT_ENTRY.size
    buf = bytearray(_SNAPSHOT_HEADER.size + size * len(entries))
    _SNAPSHOT_HEADER.pack_into(buf, 0, SNAPSHOT_VERSION, 0, len(entries))
    pos = _SNAPSHOT_HEADER.size
    for entry in entries:
        if entry.batches:
            last = entry.batches[-1]
            last_seq, last_offset, delta = last.last_seq, last.last_offset, last.last_offset - last.first_offset
        else:
            last_seq, last_offset, delta = NO_SEQUENCE, -1, 0
        _SNAPSHOT_ENTRY.pack_into(buf, pos, entry.producer_id, entry.producer_epoch, last_seq, last_offset, delta,
                                  entry.last_timestamp, entry.coordinator_epoch, entry.current_txn_first_offset)
        pos += size
    _U32.pack_into(buf, _CRC_OFFSET, crc32c(memoryview(buf)[_CRC_FROM:]))
    return bytes(buf)


def decode_snapshot(data: Buffer) -> list[ProducerStateEntry]:
    """The entries of a v1 snapshot; CorruptSnapshotError if it is not one, intact."""
    if len(data) < _SNAPSHOT_HEADER.size:
        raise CorruptSnapshotError(f"{len(data)} bytes, shorter than the {_SNAPSHOT_HEADER.size}-byte header")
    version, crc, count = _SNAPSHOT_HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"version {version}, only {SNAPSHOT_VERSION} is known")
    expected = _SNAPSHOT_HEADER.size + _SNAPSHOT_ENTRY.size * count
    if count < 0 or len(data) != expected:
        raise CorruptSnapshotError(f"{len(data)} bytes, but {count} entries take {expected}")
    actual = crc32c(memoryview(data)[_CRC_FROM:])
    if actual != crc:
        raise CorruptSnapshotError(f"CRC {crc:#010x} stored, {actual:#010x} computed")
    entries = []
    for pid, epoch, last_seq, last_offset, delta, timestamp, coordinator_epoch, txn_first_offset in \
            _SNAPSHOT_ENTRY.iter_unpack(memoryview(data)[_SNAPSHOT_HEADER.size:]):
        entry = ProducerStateEntry(pid, epoch, last_timestamp=timestamp, coordinator_epoch=coordinator_epoch,
                                   current_txn_first_offset=txn_first_offset)
        if last_offset >= 0:
            entry.batches.append(BatchMetadata(decrement_sequence(last_seq, delta), last_seq, last_offset - delta,
                                               last_offset, timestamp))
        entries.append(entry)
    return entries


def read_snapshot(path: Path) -> list[ProducerStateEntry]:
    return decode_snapshot(Path(path).read_bytes())


# -- the manager ----------------------------------------------------------------------------

class ProducerStateManager:
    """The producer state of one partition and its snapshot files. Not thread-safe.

    ``producers`` maps producer id to entry. Offsets passed in (snapshot offsets, the log
    start and end) come from the owning Log, which decides when to snapshot and replay.
    """

    def __init__(self, dir: Path, time: Time, max_producer_id_expiration_ms: int, *,
                 names: list[str] | None = None) -> None:
        """``names``: the directory's listing, when the caller has it (else it is listed here)."""
        self.dir = Path(dir)
        self.time = time
        self.producer_id_expiration_ms = max_producer_id_expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        self._name = self.dir.name
        self._snapshots: list[int] = self._list_snapshots(names)
        self._removed_since_snapshot = False  # producers forgotten at an unchanged log end
        # Transactions (Kafka's ongoingTxns / unreplicatedTxns), by first offset: those without a
        # marker yet (-> producer id), and those whose marker is not yet below the high
        # watermark (-> (producer id, marker offset)). The earliest of either is the first
        # unstable offset, which bounds the last stable offset.
        self.ongoing_txns: dict[int, int] = {}
        self.unreplicated_txns: dict[int, tuple[int, int]] = {}
        self._first_unstable: int | None = None
        self._first_unstable_valid = True

    def __repr__(self) -> str:
        return f"ProducerStateManager({self._name}, {len(self.producers)} producers, snapshots {self._snapshots})"

    # -- the state -----------------------------------------------------------------------

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def analyze_client_batch(self, header: BatchHeader) -> tuple[BatchMetadata | None, ProducerAppendInfo | None]:
        """A client's batch, alone in its request (offsets assigned): (the cached batch it
        repeats, None) or (None, its pending update); raises the KafkaError of a rule it
        breaks. One lookup: this is the produce hot path. The live state is not touched."""
        current = self.producers.get(header.producer_id)
        if current is not None:
            duplicate = current.find_duplicate_batch(header)
            if duplicate is not None:
                return duplicate, None
        info = ProducerAppendInfo(self._name, header.producer_id, current, True)
        info.append(header)
        return None, info

    def prepare_append(self, headers: Iterable[BatchHeader | tuple[BatchHeader, ControlRecord | None]], *,
                       validate: bool) -> dict[int, ProducerAppendInfo]:
        """Working copies updated with ``headers`` (each with a producer id, offsets
        assigned), several batches of a producer chaining; with ``validate``, a batch
        breaking the rules in the module docstring raises its KafkaError. The live state is
        not touched: ``update(pending.values())`` applies the result."""
        pending: dict[int, ProducerAppendInfo] = {}
        producers = self.producers
        for item in headers:
            control: ControlRecord | None = None
            if isinstance(item, BatchHeader):
                header = item
            else:  # (header, control record) of a marker
                header, control = item
            pid = header.producer_id
            info = pending.get(pid)
            if info is None:
                info = pending[pid] = ProducerAppendInfo(self._name, pid, producers.get(pid), validate)
            info.append(header, control)
        return pending

    def update(self, pending: Iterable[ProducerAppendInfo]) -> list[CompletedTxn]:
        """Merge the working copies prepared (the batches are in the log now); returns the
        transactions their markers completed, in log order."""
        now = self.time.milliseconds()
        producers = self.producers
        completed: list[CompletedTxn] = []
        for info in pending:
            entry = producers.get(info.producer_id)
            if entry is None:
                entry = producers[info.producer_id] = ProducerStateEntry(info.producer_id)
            if info.completed_txns:
                for txn in info.completed_txns:
                    self.complete_txn(txn)
                completed.extend(info.completed_txns)
            entry.update(info, now)
            if info.current_txn_first_offset >= 0 and info.current_txn_first_offset not in self.ongoing_txns:
                self.ongoing_txns[info.current_txn_first_offset] = info.producer_id
                self._first_unstable_valid = False
        if len(completed) > 1:
            completed.sort(key=lambda t: t.last_offset)
        return completed

    def replay(self, items: Iterable[BatchHeader | tuple[BatchHeader, ControlRecord | None]]) -> list[CompletedTxn]:
        """Take batches already in the log (a follower's copy, or loading) without checks;
        a marker comes as (header, its control record). Returns the transactions completed."""
        return self.update(self.prepare_append(items, validate=False).values())

    # -- transactions ----------------------------------------------------------------------

    def complete_txn(self, txn: CompletedTxn) -> None:
        """The marker of ``txn`` is in the log: the transaction is no longer ongoing, and stays
        unstable until the high watermark passes its marker (``on_high_watermark_updated``)."""
        if self.ongoing_txns.pop(txn.first_offset, None) is not None:
            self.unreplicated_txns[txn.first_offset] = (txn.producer_id, txn.last_offset)
        self._first_unstable_valid = False

    def last_stable_offset_of(self, txn: CompletedTxn) -> int:
        """Kafka's lastStableOffset(completedTxn), stored with an aborted transaction in the
        index: the first offset of the earliest other ongoing transaction, else past the marker."""
        others = [first for first, pid in self.ongoing_txns.items() if pid != txn.producer_id]
        return min(others) if others else txn.last_offset + 1

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Forget the completed transactions whose marker is below ``high_watermark``."""
        if not self.unreplicated_txns:
            return
        done = [first for first, (_pid, last) in self.unreplicated_txns.items() if last < high_watermark]
        if done:
            for first in done:
                del self.unreplicated_txns[first]
            self._first_unstable_valid = False

    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest transaction ongoing or whose marker is not yet
        replicated (below the high watermark); None when there is none."""
        if not self._first_unstable_valid:
            candidates = list(self.ongoing_txns)
            candidates.extend(self.unreplicated_txns)
            self._first_unstable = min(candidates) if candidates else None
            self._first_unstable_valid = True
        return self._first_unstable

    def _reset_txns(self) -> None:
        self.ongoing_txns.clear()
        self.unreplicated_txns.clear()
        self._first_unstable_valid = False

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget producers with no append for producer.id.expiration.ms, by the broker's
        clock (see the module docstring: not by batch timestamps); returns how many."""
        limit = self.producer_id_expiration_ms
        expired = [pid for pid, entry in self.producers.items()
                   if now_ms - entry.last_append_ms >= limit and entry.current_txn_first_offset < 0]
        for pid in expired:
            del self.producers[pid]
        self._removed_since_snapshot |= bool(expired)
        return len(expired)

    def truncate_head(self, log_start_offset: int) -> None:
        """The log now starts at ``log_start_offset``: forget the batches before it (but not
        those of a producer with an open transaction), the producers left with none, and the
        snapshots below it (as Kafka 2.5+'s truncateHead, which keeps such a producer whole)."""
        gone = []
        for pid, entry in self.producers.items():
            if entry.current_txn_first_offset >= 0:
                # kept for its open transaction (its marker may still come: the coordinator
                # writes markers after answering EndTxn) with its batches, so its next batch at
                # the same epoch is in order and a retried one is still answered as a duplicate
                continue
            batches = entry.batches
            while batches and batches[0].last_offset < log_start_offset:
                batches.popleft()
            if not batches:
                gone.append(pid)
        for pid in gone:
            del self.producers[pid]
        self._removed_since_snapshot |= bool(gone)
        for first in [f for f, (_pid, last) in self.unreplicated_txns.items() if last < log_start_offset]:
            del self.unreplicated_txns[first]
            self._first_unstable_valid = False
        self.delete_snapshots_before(log_start_offset)

    def truncate_fully(self) -> None:
        """Forget every producer and delete every snapshot."""
        self.producers.clear()
        self._reset_txns()
        self._removed_since_snapshot = False
        for offset in list(self._snapshots):
            self._delete_snapshot(offset)

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int) -> int:
        """Reset the state to the newest intact snapshot in [log start, ``log_end_offset``];
        returns its offset (the log start when there is none), from which the caller replays.
        (Kafka's truncateAndReload; recovery after a crash passes the recovery point as
        ``log_end_offset``, as Kafka's recoverSegment passes the segment's base offset.)

        Snapshots outside the range are deleted; so is one that does not read back intact
        (one warning each). Producers whose last batch is below the log start are dropped.
        Loaded entries count as appended now, for expiration.
        """
        for offset in [o for o in self._snapshots if o > log_end_offset or o < log_start_offset]:
            self._delete_snapshot(offset)
        self.producers.clear()
        self._reset_txns()
        self._removed_since_snapshot = False
        now = self.time.milliseconds()
        while self._snapshots:
            offset = self._snapshots[-1]
            path = self.dir / snapshot_file_name(offset)
            try:
                entries = read_snapshot(path)
            except (CorruptSnapshotError, OSError) as exc:
                log.warning("%s: ignoring producer state snapshot %s: %s", self._name, path.name, exc)
                self._delete_snapshot(offset)
                continue
            for entry in entries:
                if entry.last_offset >= log_start_offset or entry.current_txn_first_offset >= 0:
                    entry.last_append_ms = now
                    self.producers[entry.producer_id] = entry
                    if entry.current_txn_first_offset >= 0:
                        self.ongoing_txns[entry.current_txn_first_offset] = entry.producer_id
            return offset
        return log_start_offset

    # -- snapshots -----------------------------------------------------------------------

    @property
    def snapshot_offsets(self) -> list[int]:
        return list(self._snapshots)

    def take_snapshot(self, offset: int, sync: bool = True) -> bool:
        """Write the state as ``<offset>.snapshot`` (``offset`` = the log end offset it
        reflects) atomically, and durably unless ``sync`` is False, unless a snapshot at that
        offset holds it already (only expiration or the log start can change the state without
        moving the log end). Returns whether it wrote one. OSError propagates.

        Without ``sync`` a power loss may leave the file torn or empty: its CRC then fails and
        loading ignores it (``truncate_and_reload``), replaying from an older one instead; a
        killed process leaves it in the page cache, intact."""
        i = bisect.bisect_left(self._snapshots, offset)
        exists = i < len(self._snapshots) and self._snapshots[i] == offset
        if exists and not self._removed_since_snapshot:
            return False
        write_atomically(self.dir / snapshot_file_name(offset), encode_snapshot(self.producers.values()), sync=sync)
        if not exists:
            self._snapshots.insert(i, offset)
        self._removed_since_snapshot = False
        return True

    def try_take_snapshot(self, offset: int, sync: bool = True) -> bool:
        """``take_snapshot``, a failure logged instead of raised: snapshots only save replay
        time (the state can always be rebuilt from the log)."""
        try:
            return self.take_snapshot(offset, sync)
        except OSError as exc:
            log.error("%s: cannot write a producer state snapshot at offset %d: %s", self._name, offset, exc)
            return False

    def delete_snapshots_before(self, offset: int) -> None:
        for old in self._snapshots[:bisect.bisect_left(self._snapshots, offset)]:
            self._delete_snapshot(old)

    def retain_snapshots(self, keep_from: int, recovery_point: int) -> None:
        """Delete the snapshots below ``keep_from`` except the newest one at or below
        ``recovery_point``: recovery after a crash may cut the log anywhere above the
        recovery point, and replay then starts from that one."""
        i = bisect.bisect_right(self._snapshots, recovery_point)
        floor = self._snapshots[i - 1] if i else None
        for old in self._snapshots[:bisect.bisect_left(self._snapshots, keep_from)]:
            if old != floor:
                self._delete_snapshot(old)

    def _delete_snapshot(self, offset: int) -> None:
        self._snapshots.remove(offset)
        try:
            fileio.unlink_if_exists(self.dir / snapshot_file_name(offset))
        except OSError as exc:
            log.error("%s: cannot delete producer state snapshot at offset %d: %s", self._name, offset, exc)

    def _list_snapshots(self, names: list[str] | None) -> list[int]:
        if names is None:
            try:
                names = fileio.listdir(self.dir)
            except FileNotFoundError:
                return []
        offsets = []
        for name in names:
            stem = name[:-len(SNAPSHOT_SUFFIX)]
            if name.endswith(SNAPSHOT_SUFFIX) and len(stem) == 20 and stem.isdigit():
                offsets.append(int(stem))
        return sorted(offsets)
