"""``kbroker consume -e``'s end check (cli/consume.py ``_reached_end``) against fake brokers whose
partition leader moves while its end offset is asked."""

from __future__ import annotations

import asyncio

import pytest

from cli.consume import _reached_end
from protocol.api_keys import ApiKey
from protocol.client import KafkaClient, TopicPartition
from protocol.errors import ErrorCode
from protocol.messages import APIS
from tests.client.test_client import CLOSE, _TwoFakeBrokers, response

TP = TopicPartition("t", 0)


class EndMoves(_TwoFakeBrokers):
    """Brokers 1 and 2; the metadata names broker 1 the leader of "t"-0 until its ListOffsets
    is asked, which it answers with ``refusal`` (NOT_LEADER_OR_FOLLOWER, or CLOSE: the
    connection dropped) as broker 2 takes over; broker 2 answers end offset 7."""

    def __init__(self, refusal) -> None:
        self.refusal = refusal
        self.leader = 1
        self.list_offsets: list[int] = []  # the nodes asked, in order
        self._start_brokers()

    def respond(self, node: int, header, body: bytes):
        if header.api_key == ApiKey.API_VERSIONS:
            return self.versions(header, {ApiKey.LIST_OFFSETS: (1, 7)})
        if header.api_key == ApiKey.METADATA:
            return self.metadata(header, self.leader, self.leader)
        if header.api_key != ApiKey.LIST_OFFSETS:
            return None
        self.list_offsets.append(node)
        if node != self.leader:
            error, offset = ErrorCode.NOT_LEADER_OR_FOLLOWER, -1
        elif node == 1:
            self.leader = 2
            if self.refusal is CLOSE:
                return CLOSE
            error, offset = self.refusal, -1
        else:
            error, offset = ErrorCode.NONE, 7
        return response(header.correlation_id, APIS[ApiKey.LIST_OFFSETS].response.build(header.api_version, {
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": error, "timestamp": -1,
                                                     "offset": offset}]}]}))


@pytest.mark.parametrize("refusal", [ErrorCode.NOT_LEADER_OR_FOLLOWER, CLOSE], ids=["not-leader", "connection-lost"])
async def test_the_end_offset_is_asked_again_of_the_new_leader(refusal):
    """-e (plain or -g): the old leader refuses the ListOffsets or drops the connection; the
    check refreshes the metadata and asks broker 2 (after the client's retry backoff) instead
    of ending the command with the error. The end found is kept: asked once."""
    positions = {TP: 6}

    async def position(tp: TopicPartition) -> int:
        return positions[tp]

    async with EndMoves(refusal) as fakes:
        async with KafkaClient(f"127.0.0.1:{fakes.ports[1]}", retry_backoff_ms=1) as client:
            ends: dict[TopicPartition, int] = {}
            assert not await asyncio.wait_for(_reached_end(client, 0, ends, [TP], position), 10)  # (a hang guard)
            assert ends == {TP: 7}
            assert fakes.list_offsets == [1, 2]
            positions[TP] = 7
            assert await asyncio.wait_for(_reached_end(client, 0, ends, [TP], position), 10)
            assert fakes.list_offsets == [1, 2]
