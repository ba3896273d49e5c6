"""Incremental fetch sessions (KIP-227), the client side: Kafka's FetchSessionHandler.

One handler per broker fetched from. ``build`` turns the partitions wanted now into the next
Fetch's session id, epoch, partitions to send and partitions to forget; ``handle_response``
(or ``handle_error`` when no response came) moves the session on:

* no session yet (or one to be replaced): a full fetch of every partition, epoch 0, which asks
  the broker for a session (and closes the one named, if any);
* in a session: epoch 1, 2, ... with only the partitions added or whose fetch parameters
  changed (offset, log start offset, max bytes, leader epoch), and those dropped as forgotten;
  the response names only the partitions with something new;
* FETCH_SESSION_ID_NOT_FOUND: start over without a session id; any other top-level error, a
  response naming partitions the session does not hold (or a full one not naming exactly
  those asked for), or no response: start over with a full fetch that closes the session;
* a full response with session id 0 (the broker keeps none: a full cache, a broker without
  sessions): the next fetch is full again; an incremental response with session id 0: the
  broker closed the session.

Sans-I/O: the follower's fetcher (broker/fetcher.py) sends what ``build`` returns.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterable

from .errors import ErrorCode
from .fast_codecs import FetchPartition, FetchResponse

log = logging.getLogger("kbroker.fetch_session")

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = (1 << 31) - 1

TopicPartition = tuple[str, int]


def next_epoch(epoch: int) -> int:
    if epoch < 0:
        return FINAL_EPOCH
    if epoch == MAX_EPOCH:
        return 1
    return epoch + 1


@dataclass(slots=True)
class FetchRequestData:
    session_id: int
    epoch: int
    to_send: list[tuple[str, list[FetchPartition]]]  # by topic, in the order wanted
    to_forget: list[tuple[str, list[int]]]
    full: bool


class FetchSessionHandler:
    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        # the session's partitions as last sent (a full fetch: all of those asked for)
        self.session_partitions: dict[TopicPartition, FetchPartition] = {}

    def __repr__(self) -> str:
        return f"FetchSessionHandler(node={self.node_id}, session={self.session_id}, epoch={self.epoch})"

    @property
    def full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)

    def build(self, wanted: dict[TopicPartition, FetchPartition]) -> FetchRequestData:
        """The next Fetch for ``wanted`` (in its order)."""
        epoch = self.epoch
        if epoch == INITIAL_EPOCH or epoch == FINAL_EPOCH:  # (full, inline)
            self.session_partitions = dict(wanted)
            return FetchRequestData(self.session_id, epoch, _by_topic(wanted.items()), [], True)
        previous = self.session_partitions
        get = previous.get
        # (a fetch offset that moved, as a follower's does with every append, answers without
        # the dataclass's __eq__)
        to_send = [(key, fp) for key, fp in wanted.items()
                   if (sent := get(key)) is None or sent.fetch_offset != fp.fetch_offset or sent != fp]
        to_forget: list[tuple[str, list[int]]] = []
        if not previous.keys() <= wanted.keys():  # (a set comparison in C: mostly nothing is forgotten)
            forgotten: dict[str, list[int]] = {}
            for topic, index in previous:  # (in the session's order: a set's would follow PYTHONHASHSEED)
                if (topic, index) not in wanted:
                    forgotten.setdefault(topic, []).append(index)
            to_forget = [(t, sorted(ps)) for t, ps in forgotten.items()]
        self.session_partitions = dict(wanted)
        if len(to_send) == 1:  # (_by_topic's answer for one partition: a follower's every fetch at low load)
            ((topic, _index), fp), = to_send
            return FetchRequestData(self.session_id, epoch, [(topic, [fp])], to_forget, False)
        return FetchRequestData(self.session_id, epoch, _by_topic(to_send), to_forget, False)

    def handle_response(self, response: FetchResponse, request: FetchRequestData) -> bool:
        """Move the session on; False when the response is not to be used (an error, or one
        the session cannot explain)."""
        if response.error_code:
            if response.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
            else:
                self.epoch = INITIAL_EPOCH  # a full fetch that closes the session
            log.info("broker %d could not continue fetch session %d at epoch %d: %s; the next fetch is full",
                     self.node_id, request.session_id, request.epoch, _name(response.error_code))
            return False
        partitions = self.session_partitions
        if request.full:
            answered = {(topic, pd.partition) for topic, parts in response.responses for pd in parts}
            if answered != partitions.keys():
                log.info("broker %d sent a full fetch response with extra %s / omitted %s partitions", self.node_id,
                         sorted(answered - partitions.keys()), sorted(partitions.keys() - answered))
                self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
                return False
            if response.session_id == INVALID_SESSION_ID:
                self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
            else:
                self.session_id, self.epoch = response.session_id, next_epoch(INITIAL_EPOCH)
            return True
        for topic, parts in response.responses:
            for pd in parts:
                if (topic, pd.partition) not in partitions:
                    extra = sorted({(t, p.partition) for t, ps in response.responses for p in ps} - partitions.keys())
                    log.info("broker %d sent an incremental fetch response for session %d with partitions not in "
                             "it: %s", self.node_id, request.session_id, extra)
                    self.epoch = INITIAL_EPOCH
                    return False
        if response.session_id == INVALID_SESSION_ID:  # the broker closed the session
            self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
        else:
            epoch = self.epoch
            self.epoch = epoch + 1 if 0 <= epoch < MAX_EPOCH else next_epoch(epoch)  # (next_epoch's, inline)
        return True

    def resend_all(self) -> None:
        """A response's answer for a partition that stays in the session was not used: the
        leader's session sends a partition's high watermark and log start only when they
        changed since its last answer, so the next fetch is full (it answers every partition)."""
        if not self.full:
            self.epoch = INITIAL_EPOCH

    def handle_error(self) -> None:
        """No response (the connection failed): the next fetch is full and closes the session."""
        self.epoch = INITIAL_EPOCH


def _by_topic(items: Iterable[tuple[TopicPartition, FetchPartition]]) -> list[tuple[str, list[FetchPartition]]]:
    out: dict[str, list[FetchPartition]] = {}
    for (topic, _index), fp in items:
        out.setdefault(topic, []).append(fp)
    return list(out.items())


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
