"""The embedded controller of a single-node cluster (kbroker.controller.mode=embedded).

Until the controller process exists, ``kbroker serve`` alone is a whole cluster: this module
keeps the topic metadata durable (``kbroker-topics.json`` in the first log dir, written
atomically) and drives the broker through the same entry points a controller uses —
``ReplicaManager.become_leader_or_follower`` and the metadata cache — so the broker code
path is the same in both modes.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from storage.checkpoint import write_atomically

log = logging.getLogger("kbroker.single_node")

TOPICS_FILE = "kbroker-topics.json"


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
