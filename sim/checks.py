"""The invariants checked after every step of a run.

A step is one callback of one process; only that process's state changes in it. The
checker instruments the classes that hold replication state (for the length of the run:
``install``/``uninstall`` wrap a few methods of storage.Log, broker.partition.Partition and
the controller's QuorumController and metadata store) so that a call marks what it touched
dirty; after the step, the dirty partitions and the controller are checked against every
live node's state:

* one leader per (partition, leader epoch): no two processes (broker incarnations) lead
  the same epoch of a partition;
* on a leader, the high watermark never moves back within its epoch, and is at most the
  log end offset of every live member of its maximal ISR (the committed ISR plus a follower
  being added, KIP-497) that has not restarted since it joined that leader's ISR or, for a
  committed member, since it last entered the controller's ISR if that was earlier (a member
  that restarted without leaving the ISR may have lost unsynced records); (a replica that crashed and lost unsynced bytes may be behind until it leaves
  the ISR); a member whose log was replaced (deleted and created again by a reassignment)
  since it joined counts as new only for a leader the controller has moved past (seed 475);
* an ISR shrink only drops followers that have not caught up for replica.lag.time.max.ms
  (Kafka's isCaughtUp, KIP-497), as the leader's own bookkeeping records them, an ISR member
  counting as caught up when the leader was elected (whatever that bookkeeping says);
* in the controller's state, ISR members are unfenced and not shutting down, but for a
  last ISR member kept without a leader (KIP-841);
* the controller epoch grows with every controller incarnation, and so does each broker's
  broker epoch with each registration (within a controller incarnation; across one, never
  below an epoch a broker was answered);
* the controller's state equals the replay of the records it loaded and appended (a
  shadow controller replays them as they are written).
"""

from __future__ import annotations

import uuid
import weakref
from typing import Any, Callable

from broker.partition import Partition, PendingExpandIsr, PendingShrinkIsr, Replica
from controller.metadata_store import LocalMetadataStore
from controller.quorum_controller import QuorumController, QuorumControllerConfig
from storage.log import Log

Key = tuple[str, int]
Incarnation = tuple[Key, "uuid.UUID | None"]  # a partition of one incarnation of its topic


class Checker:
    def __init__(self, sim: Any) -> None:
        self.sim = sim
        self.dirty: dict[Key, None] = {}
        self.controller_dirty = False
        # Keyed by the partition of one incarnation of its topic (Incarnation: the name and the
        # topic id): a topic deleted and created again under its name starts over at leader epoch 0.
        self.epoch_leader: dict[tuple[Incarnation, int], tuple[str, int]] = {}
        self.leader_hw: dict[tuple[Incarnation, int, str, int], int] = {}
        self.isr_joined: dict[tuple[Incarnation, int, int], float] = {}  # (partition, leader epoch, replica) -> since
        self._isr_seen: dict[tuple[Incarnation, int], frozenset[int]] = {}
        # (broker, partition) -> (its log, when it replaced the one seen before): a log deleted and
        # created again (a reassignment that removed the broker and added it back, no restart) is new
        self._logs: dict[tuple[int, Key], tuple[Any, float]] = {}
        self.controller_epochs: list[int] = []
        self.broker_epochs: dict[int, int] = {}
        self.shadow: QuorumController | None = None
        self.shadow_owner: Any = None  # the controller process the shadow follows
        self._originals: list[tuple[Any, str, Any]] = []
        self._log_machine: dict[int, str] = {}
        self.lag_max_ms = 0
        self.taken_on: dict[int, tuple[Replica, int]] = {}  # id(Replica) -> (it, caught up at the election)
        self.checks = 0

    # -- instrumentation ---------------------------------------------------------------------
    def install(self) -> None:
        checker = self

        def after(cls: Any, name: str, hook: Callable[[Any, Any], None]) -> None:
            original = getattr(cls, name)

            def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
                result = original(self, *args, **kwargs)
                hook(self, result)
                return result
            wrapper.__name__ = name
            self._originals.append((cls, name, original))
            setattr(cls, name, wrapper)

        def log_changed(log: Log, _result: Any) -> None:
            checker.dirty[(log.topic, log.partition)] = None

        def partition_changed(partition: Partition, _result: Any) -> None:
            checker.dirty[partition.key] = None
            log = partition.log
            if log is not None:
                # Whose log it is, for update_high_watermark below (weakly: no reference cycle
                # for the garbage collector to break at a time of its choosing).
                log._sim_partition = weakref.ref(partition)  # type: ignore[attr-defined]

        # What can break a partition's invariants: a high watermark moving, a log end going
        # back, a log start moving, a leadership or ISR change. An append only moves a log end
        # forward, which breaks none (HW <= LEO of the ISR members can only become true), so
        # appends, most of a run's calls, are not watched.
        for name in ("truncate_to", "truncate_fully_and_start_at", "maybe_increment_log_start_offset"):
            after(Log, name, log_changed)
        # A high watermark set to what it was changes nothing, and neither does a follower's
        # (every fetch answer sets it, two of every three HW moves; the checks read only
        # leaders' HWs): skipped when the log's partition, as last seen by make_leader,
        # make_follower or an AlterPartition result, is there, still holds it and does not lead
        # now. A log never seen counts as a leader's.
        original_update_hw = Log.update_high_watermark

        def update_high_watermark(log: Log, hw: int) -> int:
            before = log.high_watermark
            result = original_update_hw(log, hw)
            if log.high_watermark != before:
                ref = getattr(log, "_sim_partition", None)
                partition = ref() if ref is not None else None
                if partition is None or partition.is_leader or partition.log is not log:
                    checker.dirty[(log.topic, log.partition)] = None
            return result
        self._originals.append((Log, "update_high_watermark", original_update_hw))
        Log.update_high_watermark = update_high_watermark  # type: ignore[method-assign]
        for name in ("make_leader", "make_follower", "_on_alter_partition_result"):
            after(Partition, name, partition_changed)

        # When a leader took each follower on (Replica.reset, at its election): an ISR member
        # counts as caught up from then, whatever the leader's own bookkeeping says.
        original_reset = Replica.reset

        def reset(replica: Replica, now_ms: int, leader_end_offset: int, in_sync: bool) -> None:
            original_reset(replica, now_ms, leader_end_offset, in_sync)
            checker.taken_on[id(replica)] = (replica, now_ms if in_sync else 0)
        self._originals.append((Replica, "reset", original_reset))
        Replica.reset = reset  # type: ignore[method-assign]

        original_propose = Partition._propose

        def propose(partition: Partition, proposal: Any, reason: str) -> None:
            if isinstance(proposal, PendingShrinkIsr):
                checker.check_shrink(partition, proposal)
            original_propose(partition, proposal, reason)
            checker.dirty[partition.key] = None  # (the maximal ISR may have grown: noted when it did)
        self._originals.append((Partition, "_propose", original_propose))
        Partition._propose = propose  # type: ignore[method-assign]

        original_replay = QuorumController.replay

        def replay(controller: QuorumController, record: Any, offset: Any = None) -> None:
            original_replay(controller, record, offset)
            if controller is not checker.shadow:
                checker.controller_dirty = True
        self._originals.append((QuorumController, "replay", original_replay))
        QuorumController.replay = replay  # type: ignore[method-assign]

        original_load = LocalMetadataStore.load

        async def load(store: LocalMetadataStore) -> Any:
            loaded = await original_load(store)
            checker.controller_loaded(store, loaded)
            return loaded
        self._originals.append((LocalMetadataStore, "load", original_load))
        LocalMetadataStore.load = load  # type: ignore[method-assign]

        original_append = LocalMetadataStore.append

        def append(store: LocalMetadataStore, records: Any, epoch: int) -> int:
            last = original_append(store, records, epoch)
            checker.controller_appended(store, records)
            return last
        self._originals.append((LocalMetadataStore, "append", original_append))
        LocalMetadataStore.append = append  # type: ignore[method-assign]

    def uninstall(self) -> None:
        for cls, name, original in reversed(self._originals):
            setattr(cls, name, original)
        self._originals.clear()

    # -- after each step ---------------------------------------------------------------------
    def after_step(self) -> None:
        if self.dirty:
            dirty, self.dirty = self.dirty, {}
            for key in dirty:
                self.check_partition(key)
        if self.controller_dirty:
            self.controller_dirty = False
            self.check_controller()

    # -- partitions --------------------------------------------------------------------------
    def replicas(self, key: Key) -> list[tuple[Any, Partition]]:
        """(node, Partition) of every live broker hosting ``key`` with a log."""
        out = []
        for node in self.sim.cluster.brokers.values():
            server = node.server
            if server is None or not node.alive:
                continue
            rm = server.replica_manager
            if rm is None:
                continue
            p = rm.partitions.get(key)
            if p is not None and p.log is not None:
                out.append((node, p))
        return out

    def check_partition(self, key: Key) -> None:
        self.checks += 1
        sim = self.sim
        replicas = self.replicas(key)
        by_id = {node.node_id: (node, p) for node, p in replicas}
        now = sim.loop.time()
        for node, p in replicas:
            if not p.is_leader:
                continue
            epoch = p.leader_epoch
            who = (node.name, node.process.incarnation)
            topic_id = _topic_id(node, key[0])
            incarnation = (key, topic_id)
            seen = self.epoch_leader.setdefault((incarnation, epoch), who)
            if seen != who:
                sim.violation("one-leader-per-epoch", f"{key[0]}-{key[1]} (topic id {topic_id}) leader epoch {epoch}: "
                              f"led by {seen[0]}#{seen[1]} and by {who[0]}#{who[1]}")
                self.epoch_leader[(incarnation, epoch)] = who
            hw = p.log.high_watermark
            hw_key = (incarnation, epoch, who[0], who[1])
            last = self.leader_hw.get(hw_key)
            if last is not None and hw < last:
                sim.violation("hw-monotonic", f"{key[0]}-{key[1]} on leader {who[0]}#{who[1]} at epoch {epoch}: "
                              f"high watermark {last} -> {hw}")
            self.leader_hw[hw_key] = hw
            # The maximal ISR (KIP-497): the committed ISR plus a follower being added, taken from
            # the proposal in flight rather than from Partition.maximal_isr (the code under check).
            state = p.partition_state
            isr = state.proposed_isr if isinstance(state, PendingExpandIsr) else state.isr
            seen_key = (incarnation, epoch)
            previous = self._isr_seen.get(seen_key, frozenset())
            if isr != previous:
                for r in isr - previous:
                    self.isr_joined[(incarnation, epoch, r)] = now
                for r in previous - isr:
                    self.isr_joined.pop((incarnation, epoch, r), None)
                self._isr_seen[seen_key] = isr
            for r in isr:
                if r == node.node_id:
                    continue
                replica = by_id.get(r)
                if replica is None:
                    continue  # dead, or not hosting it (yet)
                rnode, rp = replica
                joined = self.isr_joined.get((incarnation, epoch, r))
                # A member of the committed ISR may have been in it since before this epoch: it is
                # whole only if it has not restarted since it last entered the controller's ISR (a
                # leader's view may lag: it still lists a member the controller dropped after a crash).
                entered = (sim.isr_entered.get((key, r))
                           if r in p.isr and sim.topic_ids.get(key, topic_id) == topic_id else None)
                if entered is not None and (joined is None or entered < joined):
                    joined = entered
                seen = self._logs.get((r, key))
                if seen is None or seen[0] is not rp.log:  # (the first one seen counts as old)
                    seen = self._logs[(r, key)] = (rp.log, 0.0 if seen is None else now)
                if joined is None or rnode.started_at > joined:
                    continue  # restarted since it joined: it may have lost unsynced bytes
                if seen[1] > joined and self.stale_leader(key, topic_id, epoch):
                    # its log is newer than its membership: removed from the replicas (log deleted)
                    # and added back since, as a leader cut off from the controller cannot know
                    # (the controller has moved past its epoch); a current leader would have to
                    continue
                leo = rp.log.log_end_offset
                if leo < hw:
                    sim.violation("hw-le-isr-leo", f"{key[0]}-{key[1]} leader {who[0]}#{who[1]} epoch {epoch}: high "
                                  f"watermark {hw} above the log end offset {leo} of ISR member {rnode.process.key} "
                                  f"(maximal ISR {sorted(isr)}, committed {sorted(p.isr)}, member since {joined:.6f})")

    def stale_leader(self, key: Key, topic_id: uuid.UUID | None, epoch: int) -> bool:
        """Whether the controller (the replay of its records, else the live one) has moved the
        partition past ``epoch``: a later leader epoch, or another incarnation of its topic."""
        controller = self.shadow if self.shadow is not None else self.live_controller()
        if controller is None:
            return False
        info = controller.replication.topic(key[0])
        if info is None or (topic_id is not None and info.topic_id != topic_id):
            return True
        part = info.parts.get(key[1])
        return part is None or epoch < part.leader_epoch

    def check_shrink(self, partition: Partition, proposal: PendingShrinkIsr) -> None:
        """Kafka's isCaughtUp: a follower leaves the ISR only once it has been behind the
        leader's log end for longer than replica.lag.time.max.ms."""
        now = partition.time.milliseconds()
        lag_max = partition.replica_lag_time_max_ms
        leo = partition.log.log_end_offset if partition.log is not None else -1
        for rid in sorted(proposal.out_of_sync):
            replica = partition.remote_replicas.get(rid)
            if replica is None:
                continue
            taken_on = self.taken_on.get(id(replica))
            caught_up = replica.last_caught_up_time_ms
            if taken_on is not None and taken_on[0] is replica:
                caught_up = max(caught_up, taken_on[1])
            if replica.log_end_offset >= leo or now - caught_up <= lag_max:
                self.sim.violation("isr-shrink-justified", f"{partition.topic}-{partition.partition} leader "
                                   f"{partition.local_broker_id} epoch {partition.leader_epoch} drops {rid} from the ISR "
                                   f"{sorted(proposal.isr)}: caught up {now - caught_up} ms ago "
                                   f"(replica.lag.time.max.ms={lag_max}), its LEO {replica.log_end_offset}, leader's {leo}")

    # -- the controller ------------------------------------------------------------------------
    def live_controller(self) -> QuorumController | None:
        node = self.sim.cluster.controller
        if not node.alive or node.server is None:
            return None
        return node.server.controller

    def controller_loaded(self, store: LocalMetadataStore, loaded: Any) -> None:
        """A controller incarnation loaded its metadata: the shadow starts over from it."""
        self.broker_epochs = {}
        self.shadow = _shadow(self.sim)
        for record in loaded.snapshot_records:
            self.shadow.replay(record)
        for _offset, record in loaded.log_records:
            self.shadow.replay(record)
        self.shadow_owner = store
        # The ISRs as loaded are the baseline: a member the lost (unsynced) tail of the old
        # controller's log had dropped is back in them without having rejoined anything.
        for info, pid, part in self.shadow.replication.all_partitions():
            self.sim.isr_changed((info.name, pid), frozenset(part.isr), info.topic_id, reloaded=True)

    def controller_appended(self, store: LocalMetadataStore, records: Any) -> None:
        if self.shadow is not None and store is self.shadow_owner:
            for record in records:
                self.shadow.replay(record)

    def check_controller(self) -> None:
        controller = self.live_controller()
        if controller is None:
            return
        sim = self.sim
        cluster = controller.cluster
        for info, pid, part in controller.replication.all_partitions():
            sim.isr_changed((info.name, pid), frozenset(part.isr), info.topic_id)
            if len(part.isr) == 1 and part.leader < 0:
                continue  # the last ISR member is kept, leaderless, when it goes (Kafka's ELR-less rule)
            for r in part.isr:
                reg = cluster.registration(r)
                if reg is None or reg.fenced or reg.in_controlled_shutdown:
                    state = "not registered" if reg is None else "fenced" if reg.fenced else "shutting down"
                    sim.violation("isr-eligible", f"{info.name}-{pid}: ISR {list(part.isr)} (leader {part.leader}, "
                                  f"leader epoch {part.leader_epoch}) holds broker {r}, {state}")
        # Within a controller incarnation a registration's epoch never goes back; across one, it
        # never goes below an epoch a broker was answered (a record appended but not yet synced
        # when the controller lost power is legitimately gone, and nobody saw it).
        for broker_id, reg in sorted(cluster.brokers.items()):
            last = self.broker_epochs.get(broker_id)
            if last is not None and reg.epoch < last:
                sim.violation("broker-epoch-monotonic", f"broker {broker_id}: registered epoch {last} then {reg.epoch}")
            answered = sim.answered_broker_epochs.get(broker_id)
            if answered is not None and reg.epoch < answered:
                sim.violation("broker-epoch-monotonic", f"broker {broker_id}: registered epoch {reg.epoch} in the "
                              f"controller's state, below the epoch {answered} it was answered")
            self.broker_epochs[broker_id] = max(reg.epoch, last if last is not None else reg.epoch)
        if self.shadow is not None and self.shadow_owner is controller.store and controller.active:
            live, replayed = controller.state_summary(), self.shadow.state_summary()
            if live != replayed:
                diff = [k for k in live if live[k] != replayed.get(k)]
                sim.violation("metadata-replay", f"the controller's state differs from the replay of its records in "
                              f"{', '.join(diff)}")

    def controller_started(self, epoch: int) -> None:
        if self.controller_epochs and epoch <= self.controller_epochs[-1]:
            self.sim.violation("controller-epoch-monotonic", f"controller epoch {epoch} after {self.controller_epochs[-1]}")
        self.controller_epochs.append(epoch)


def _topic_id(node: Any, topic: str) -> uuid.UUID | None:
    """The id of the topic as a broker knows it (its metadata cache): the incarnation of the
    topic its partition of that name belongs to; None while it knows none."""
    cache = node.server.metadata_cache
    info = cache.topics.get(topic) if cache is not None else None
    return info.topic_id if info is not None and info.topic_id.int else None


def _shadow(sim: Any) -> QuorumController:
    node = sim.cluster.controller
    cluster_id = node.server.cluster_id if node.server is not None and node.server.cluster_id else "shadow"
    return QuorumController(QuorumControllerConfig(node_id=node.node_id, cluster_id=cluster_id), store=None,  # type: ignore[arg-type]
                            time=sim.time)
