"""LogConfig: the topic-level settings a partition log obeys, with Kafka's names and defaults.

Field names are Kafka's topic-level config keys with dots turned into underscores
(``segment.bytes`` -> ``segment_bytes``), so ``from_topic_properties`` and
``to_topic_properties`` are a plain rename plus type checks. Only settings the storage
layer (or the broker's acks=all check, ``min.insync.replicas``) reads are here.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
# Kafka's BrokerCompressionType: "producer" keeps each batch's codec, any other name is the
# codec every batch is stored in (re-compressed by the LogValidator when it arrives in another).
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_CODEC_IDS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}  # the batch attribute's codec bits

# key -> (smallest allowed, largest allowed); Kafka's ConfigDef ranges where it has one.
_INT_RANGES: dict[str, tuple[int, int]] = {
    "segment_bytes": (14, INT32_MAX),          # positions in the offset index are int32
    "segment_ms": (1, INT64_MAX),
    "segment_jitter_ms": (0, INT64_MAX),
    "segment_index_bytes": (12, INT32_MAX),    # room for at least one time-index entry
    "index_interval_bytes": (0, INT32_MAX),
    "retention_bytes": (-1, INT64_MAX),
    "retention_ms": (-1, INT64_MAX),
    "max_message_bytes": (0, INT32_MAX),
    "flush_messages": (1, INT64_MAX),
    "flush_ms": (0, INT64_MAX),
    "min_insync_replicas": (1, INT32_MAX),
    "file_delete_delay_ms": (0, INT64_MAX),
    "producer_id_expiration_ms": (1, INT64_MAX),
    "delete_retention_ms": (0, INT64_MAX),
    "min_compaction_lag_ms": (0, INT64_MAX),
    "writeback_bytes": (0, INT64_MAX),
    "cache_retain_bytes": (-1, INT64_MAX),
}
CLEANUP_POLICIES = ("delete", "compact")
# Broker-level settings carried here because the log obeys them: ``from_topic_properties``
# reads them (the broker passes its value that way) but they are no topic configs in
# Kafka, so ``to_topic_properties`` leaves them out.
_BROKER_LEVEL = frozenset({"producer_id_expiration_ms", "writeback_bytes", "cache_retain_bytes"})


@functools.lru_cache(maxsize=64)
def _policies(cleanup_policy: str) -> frozenset[str]:
    """The policies of a cleanup.policy value (read on every append: parsed once per value)."""
    return frozenset(p.strip() for p in cleanup_policy.split(","))


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Immutable; build a changed copy with ``dataclasses.replace`` or ``from_topic_properties``."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_bytes: int = -1
    retention_ms: int = 604800000
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    compression_type: str = "producer"
    flush_messages: int = INT64_MAX
    flush_ms: int = INT64_MAX
    min_insync_replicas: int = 1
    file_delete_delay_ms: int = 60000
    producer_id_expiration_ms: int = 86400000  # the broker's producer.id.expiration.ms
    # Compaction (storage/log_cleaner.py): "delete", "compact" or both ("compact,delete").
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 86400000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    # A new segment reserves segment.bytes on disk (fallocate, its size kept: file_records.py)
    preallocate: bool = False
    # The broker's kbroker.log.writeback.bytes and kbroker.log.page.cache.retain.bytes: the active
    # segment starts the writeback of every this many bytes appended (0: the kernel decides, as
    # for Kafka; the broker's default is 1 MiB, this class's 0), and then drops the page cache of
    # what lies more than cache_retain_bytes behind its end (-1: keeps it). file_records.py
    # "Writeback".
    writeback_bytes: int = 0
    cache_retain_bytes: int = -1

    def __post_init__(self) -> None:
        for name, (lo, hi) in _INT_RANGES.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise ValueError(f"{_key(name)}: {value!r} is not an integer in [{lo}, {hi}]")
        policies = [p.strip() for p in self.cleanup_policy.split(",") if p.strip()]
        if not policies or any(p not in CLEANUP_POLICIES for p in policies):
            raise ValueError(f"cleanup.policy: {self.cleanup_policy!r} is not a list of {', '.join(CLEANUP_POLICIES)}")
        if not isinstance(self.preallocate, bool):
            raise ValueError(f"preallocate: {self.preallocate!r} is not true or false")
        ratio = self.min_cleanable_dirty_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio <= 1:
            raise ValueError(f"min.cleanable.dirty.ratio: {ratio!r} is not a number in [0, 1]")
        if self.message_timestamp_type not in TIMESTAMP_TYPES:
            raise ValueError(f"message.timestamp.type: {self.message_timestamp_type!r} is not one of "
                             f"{', '.join(TIMESTAMP_TYPES)}")
        if self.compression_type not in COMPRESSION_TYPES:
            raise ValueError(f"compression.type: {self.compression_type!r} is not one of {', '.join(COMPRESSION_TYPES)}")

    @property
    def target_codec(self) -> int | None:
        """The codec id batches are stored in, or None for "producer" (as they come)."""
        if self.compression_type == "producer":
            return None
        return _CODEC_IDS[self.compression_type]

    @property
    def compact(self) -> bool:
        """cleanup.policy includes compact: the log cleaner keeps the newest record of each key."""
        return "compact" in _policies(self.cleanup_policy)

    @property
    def delete(self) -> bool:
        """cleanup.policy includes delete: retention.ms / retention.bytes delete old segments."""
        return "delete" in _policies(self.cleanup_policy)

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @classmethod
    def from_topic_properties(cls, props: dict[str, str], base: LogConfig | None = None) -> LogConfig:
        """``base`` (default: Kafka's defaults) overridden by Kafka-named properties.

        Unknown keys are ignored (topics carry configs the storage layer does not read,
        such as ``cleanup.policy``); a value that does not parse or is out of range raises
        ValueError naming the key.
        """
        base = base or cls()
        changes: dict[str, Any] = {}  # field name -> value: fields chosen by name at run time
        for key, raw in props.items():
            name = key.replace(".", "_")
            if name in ("message_timestamp_type", "compression_type", "cleanup_policy"):
                changes[name] = ",".join(p.strip() for p in str(raw).split(",")) if name == "cleanup_policy" \
                    else str(raw).strip()
            elif name == "preallocate":
                flag = str(raw).strip().lower()
                if flag not in ("true", "false"):
                    raise ValueError(f"{key}: {raw!r} is not true or false")
                changes[name] = flag == "true"
            elif name == "min_cleanable_dirty_ratio":
                try:
                    changes[name] = float(str(raw).strip())
                except ValueError:
                    raise ValueError(f"{key}: {raw!r} is not a number") from None
            elif name in _INT_RANGES:
                try:
                    changes[name] = int(str(raw).strip())
                except ValueError:
                    raise ValueError(f"{key}: {raw!r} is not an integer") from None
        return dataclasses.replace(base, **changes)

    def to_topic_properties(self) -> dict[str, str]:
        return {_key(f.name): _text(getattr(self, f.name)) for f in dataclasses.fields(self)
                if f.name not in _BROKER_LEVEL}


def _text(value: Any) -> str:
    """A value as Kafka writes it (booleans lower-case)."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _key(field_name: str) -> str:
    return field_name.replace("_", ".")
