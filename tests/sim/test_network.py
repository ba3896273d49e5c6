"""sim/network.py: connections between simulated machines, through the loop's
create_server/create_connection, with partitions, resets and crashes."""

from __future__ import annotations

import asyncio
import random

import pytest

from sim.loop import Process, SimLoop
from sim.network import SimNetwork


class Collect(asyncio.Protocol):
    def __init__(self) -> None:
        self.data = bytearray()
        self.lost: list[BaseException | None] = []
        self.transport = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.data += data

    def connection_lost(self, exc) -> None:
        self.lost.append(exc)


class Sim:
    def __init__(self, seed: int = 1) -> None:
        self.loop = SimLoop(random.Random(seed))
        self.network = SimNetwork(self.loop)
        self.server = Process("server", "srv", 1)
        self.client = Process("client", "cli", 1)
        self.accepted: list[Collect] = []

    def run(self, coro):
        try:
            return self.loop.run_until_complete(coro)
        finally:
            self.loop.close()

    async def listen(self, port: int = 9092):
        def factory():
            protocol = Collect()
            self.accepted.append(protocol)
            return protocol

        async def start():
            return await self.loop.create_server(factory, "srv", port)
        return await self.loop.create_task(start(), context=self.server.context())

    async def connect(self, port: int = 9092):
        async def open_():
            return await self.loop.create_connection(Collect, "srv", port)
        return await self.loop.create_task(open_(), context=self.client.context())


def test_bytes_arrive_in_order_whatever_the_latencies_and_splits():
    sim = Sim(7)

    async def main():
        server = await sim.listen()
        assert server.sockets[0].getsockname() == ("srv", 9092)
        transport, _protocol = await sim.connect()
        sent = bytearray()
        for i in range(500):
            chunk = bytes([i % 251]) * (1 + i % 97)
            sent += chunk
            sim.loop.call_soon(transport.write, chunk, context=sim.client.context())
            if i % 50 == 0:
                await asyncio.sleep(0.0001)
        await asyncio.sleep(1)
        return sent

    sent = sim.run(main())
    assert bytes(sim.accepted[0].data) == bytes(sent)


def test_a_partition_holds_bytes_and_connects_until_it_heals():
    sim = Sim(8)

    async def main():
        await sim.listen()
        transport, protocol = await sim.connect()
        sim.network.partition("cli", "srv")
        sim.loop.call_soon(transport.write, b"held", context=sim.client.context())
        await asyncio.sleep(5)
        assert sim.accepted[0].data == b""
        connecting = asyncio.ensure_future(sim.connect())
        await asyncio.sleep(3)
        assert not connecting.done()  # the SYN is lost
        sim.network.heal()
        await asyncio.sleep(0.01)
        assert sim.accepted[0].data == b"held"
        await asyncio.wait_for(connecting, 10)  # the next SYN retransmission gets through
        assert len(sim.accepted) == 2

    sim.run(main())


def test_one_way_partition_blocks_one_direction():
    sim = Sim(9)

    async def main():
        await sim.listen()
        transport, protocol = await sim.connect()
        await asyncio.sleep(0.01)
        sim.network.partition("srv", "cli", one_way=True)
        sim.loop.call_soon(transport.write, b"up", context=sim.client.context())
        sim.loop.call_soon(sim.accepted[0].transport.write, b"down", context=sim.server.context())
        await asyncio.sleep(1)
        assert sim.accepted[0].data == b"up" and protocol.data == b""

    sim.run(main())


def test_refused_without_a_listener_and_reset_when_the_peer_process_dies():
    sim = Sim(10)

    async def main():
        with pytest.raises(ConnectionRefusedError):
            await sim.connect()
        await sim.listen()
        transport, protocol = await sim.connect()
        await asyncio.sleep(0.01)
        sim.loop.kill(sim.server)
        sim.network.process_died(sim.server, power_loss=False)
        await asyncio.sleep(0.01)
        assert len(protocol.lost) == 1 and isinstance(protocol.lost[0], ConnectionResetError)
        with pytest.raises(ConnectionRefusedError):
            await sim.connect()

    sim.run(main())


def test_a_peer_that_lost_power_is_silent_until_written_to():
    sim = Sim(11)

    async def main():
        await sim.listen()
        transport, protocol = await sim.connect()
        await asyncio.sleep(0.01)
        sim.loop.kill(sim.server)
        sim.network.process_died(sim.server, power_loss=True)
        await asyncio.sleep(1)
        assert protocol.lost == []  # nothing tells a peer that a machine lost power
        sim.loop.call_soon(transport.write, b"hello?", context=sim.client.context())
        await asyncio.sleep(0.1)
        assert len(protocol.lost) == 1 and isinstance(protocol.lost[0], ConnectionResetError)

    sim.run(main())


def test_reading_paused_holds_what_arrives():
    sim = Sim(12)

    async def main():
        await sim.listen()
        transport, _protocol = await sim.connect()
        await asyncio.sleep(0.01)
        server_side = sim.accepted[0]
        sim.loop.call_soon(server_side.transport.pause_reading, context=sim.server.context())
        await asyncio.sleep(0.01)
        sim.loop.call_soon(transport.write, b"abc", context=sim.client.context())
        await asyncio.sleep(1)
        assert server_side.data == b""
        sim.loop.call_soon(server_side.transport.resume_reading, context=sim.server.context())
        await asyncio.sleep(0.01)
        assert server_side.data == b"abc"

    sim.run(main())
