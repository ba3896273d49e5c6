"""The embedded controller of a single-node cluster (kbroker.controller.mode=embedded).

Until the controller process exists, ``kbroker serve`` alone is a whole cluster: this
controller keeps the topic metadata durable (``kbroker-topics.json`` in the first log dir,
written atomically), decides assignments for new topics, and drives the broker only through
the entry points a controller uses — ``ReplicaManager.become_leader_or_follower`` (what
LeaderAndIsr does) and the metadata cache (what UpdateMetadata does) — so the broker's code
path is the same in both modes. KafkaApis reaches it as a ``TopicAdmin``.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from protocol.errors import ErrorCode
from storage.checkpoint import write_atomically

from .metadata_cache import PartitionInfo, TopicInfo
from .partition import LeaderAndIsrState
from .config import validate_topic_configs, validate_topic_name
from .topic_admin import NewTopic, TopicResult, TopicResultsCallback

if TYPE_CHECKING:
    from .config import KafkaConfig
    from .metadata_cache import MetadataCache
    from .replica_manager import ReplicaManager

log = logging.getLogger("kbroker.embedded_controller")

TOPICS_FILE = "kbroker-topics.json"

# -- the durable topic store ---------------------------------------------------------------
@dataclass
class TopicRecord:
    name: str
    topic_id: uuid.UUID
    assignment: dict[int, list[int]]  # partition -> replicas
    configs: dict[str, str] = field(default_factory=dict)
    leader_epochs: dict[int, int] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"topic_id": str(self.topic_id), "assignment": {str(p): r for p, r in self.assignment.items()},
                "configs": self.configs, "leader_epochs": {str(p): e for p, e in self.leader_epochs.items()}}

    @classmethod
    def from_json(cls, name: str, d: dict) -> "TopicRecord":
        return cls(name, uuid.UUID(d["topic_id"]), {int(p): list(r) for p, r in d["assignment"].items()},
                   dict(d.get("configs", {})), {int(p): int(e) for p, e in d.get("leader_epochs", {}).items()})


class TopicStore:
    """Durable topic metadata: assignment, configs and leader epochs per topic."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.topics: dict[str, TopicRecord] = {}

    def load(self) -> None:
        if not self.path.exists():
            return
        data = json.loads(self.path.read_text(encoding="utf-8"))
        if data.get("version") != 1:
            raise ValueError(f"{self.path}: unsupported version {data.get('version')!r}")
        self.topics = {name: TopicRecord.from_json(name, d) for name, d in data["topics"].items()}

    def save(self) -> None:
        body = {"version": 1, "topics": {n: t.to_json() for n, t in sorted(self.topics.items())}}
        write_atomically(self.path, json.dumps(body, indent=1, sort_keys=True).encode())

    def put(self, record: TopicRecord) -> None:
        self.topics[record.name] = record
        self.save()

    def remove(self, name: str) -> None:
        if self.topics.pop(name, None) is not None:
            self.save()


# -- the controller ------------------------------------------------------------------------
class EmbeddedController:
    """The single-node cluster's controller: this broker is the only broker, the controller
    and the leader of every partition."""

    def __init__(self, config: "KafkaConfig", broker_id: int, metadata_cache: "MetadataCache",
                 replica_manager: "ReplicaManager") -> None:
        self.config = config
        self.broker_id = broker_id
        self.metadata_cache = metadata_cache
        self.replica_manager = replica_manager
        self.topic_store = TopicStore(config.log_dirs[0] / TOPICS_FILE)

    def start(self) -> None:
        """Announce this broker as the controller and bring every stored topic online."""
        self.metadata_cache.controller_id = self.broker_id
        self.topic_store.load()
        for record in self.topic_store.topics.values():
            self._bring_online(record)

    def _bring_online(self, record: TopicRecord) -> None:
        """What UpdateMetadata and LeaderAndIsr would carry: this broker leads every partition."""
        states = []
        info = TopicInfo(record.name, record.topic_id, {}, dict(record.configs))
        for p, replicas in sorted(record.assignment.items()):
            epoch = record.leader_epochs.get(p, 0)
            states.append(LeaderAndIsrState(record.name, p, 0, self.broker_id, epoch, list(replicas), 0, list(replicas)))
            info.partitions[p] = PartitionInfo(p, self.broker_id, epoch, list(replicas), list(replicas))
        self.metadata_cache.put_topic(info)
        self.replica_manager.become_leader_or_follower(self.broker_id, 0, states)

    # -- TopicAdmin ------------------------------------------------------------------------
    def create_topics(self, topics: list[NewTopic], validate_only: bool, callback: TopicResultsCallback) -> None:
        callback([self.create_topic(t.name, t.num_partitions, t.replication_factor, t.assignments, t.configs,
                                    validate_only=validate_only) for t in topics])

    def delete_topics(self, names: list[str], callback: TopicResultsCallback) -> None:
        callback([self.delete_topic(name) for name in names])

    def maybe_auto_create_topic(self, name: str, allow: bool) -> int:
        if validate_topic_name(name) is not None:
            return ErrorCode.INVALID_TOPIC_EXCEPTION
        if not (allow and self.config["auto.create.topics.enable"]):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        code, message = self.create_topic(name, -1, -1, {}, {})
        if code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            log.warning("auto-creating topic %r failed: %s", name, message)
            return code
        return ErrorCode.NONE

    # -- one topic -------------------------------------------------------------------------
    def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                     assignments: dict[int, list[int]], configs: dict[str, str | None],
                     validate_only: bool = False) -> TopicResult:
        reason = validate_topic_name(name)
        if reason is not None:
            return ErrorCode.INVALID_TOPIC_EXCEPTION, reason
        if name in self.topic_store.topics:
            return ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."
        collides = [t for t in self.topic_store.topics if t.replace(".", "_") == name.replace(".", "_")]
        if collides:
            return ErrorCode.INVALID_TOPIC_EXCEPTION, f"topic {name!r} collides with existing topic {collides[0]!r}"
        brokers = sorted(self.metadata_cache.brokers)
        if assignments:
            if num_partitions != -1 or replication_factor != -1:
                return ErrorCode.INVALID_REQUEST, "give either assignments or partitions/replication factor"
            if sorted(assignments) != list(range(len(assignments))):
                return ErrorCode.INVALID_REPLICA_ASSIGNMENT, "partitions must be numbered 0..n-1"
            for p, replicas in assignments.items():
                if not replicas or len(set(replicas)) != len(replicas) or any(b not in brokers for b in replicas):
                    return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                            f"partition {p}: replicas {replicas} are not distinct live brokers")
            assignment = {p: list(r) for p, r in assignments.items()}
        else:
            n = self.config["num.partitions"] if num_partitions == -1 else num_partitions
            rf = self.config["default.replication.factor"] if replication_factor == -1 else replication_factor
            if n < 1:
                return ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
            if rf < 1:
                return ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."
            if rf > len(brokers):
                return ErrorCode.INVALID_REPLICATION_FACTOR, (
                    f"Replication factor: {rf} larger than available brokers: {len(brokers)}.")
            assignment = {p: [brokers[(p + i) % len(brokers)] for i in range(rf)] for p in range(n)}
        clean = {k: v for k, v in configs.items() if v is not None}
        problem = validate_topic_configs(clean, self.config.topic_defaults())
        if problem is not None:
            return ErrorCode.INVALID_CONFIG, problem
        if validate_only:
            return ErrorCode.NONE, None
        record = TopicRecord(name, uuid.uuid4(), assignment, clean, {p: 0 for p in assignment})
        self.topic_store.put(record)
        self._bring_online(record)
        log.info("created topic %s: %d partitions, configs %s", name, len(assignment), clean or "{}")
        return ErrorCode.NONE, None

    def delete_topic(self, name: str) -> TopicResult:
        if not self.config["delete.topic.enable"]:
            return ErrorCode.TOPIC_DELETION_DISABLED, "delete.topic.enable is false"
        record = self.topic_store.topics.get(name)
        if record is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist"
        self.topic_store.remove(name)
        self.metadata_cache.remove_topic(name)
        self.replica_manager.stop_replicas([(name, p) for p in record.assignment], delete=True)
        log.info("deleted topic %s", name)
        return ErrorCode.NONE, None
