"""Producer ids never repeat: across restarts (durable blocks) and across brokers (id spaces) for a
broker without a controller; blocks from the controller, prefetched, for one with."""

from __future__ import annotations

import pytest

from broker.producer_ids import LocalBlockSource, ProducerIdManager, RPCProducerIdManager
from protocol.api_keys import ApiKey
from protocol.client import KafkaConnectionError
from protocol.clock import MockTime
from protocol.errors import ErrorCode

from .controller_fakes import ScriptedController, settle


def test_ids_are_unique_across_restarts_and_crashes(tmp_path):
    path = tmp_path / "kbroker-producer-id-block"
    seen = set()
    for restart in range(5):
        manager = ProducerIdManager(LocalBlockSource(path, broker_id=7, block_size=10))
        for _ in range(13 if restart % 2 else 3):  # crossing block boundaries, or abandoning a block
            pid = manager.generate_producer_id()
            assert pid not in seen
            seen.add(pid)
    assert all(7 << 32 <= pid < 8 << 32 for pid in seen)


def test_brokers_have_disjoint_id_spaces(tmp_path):
    a = ProducerIdManager(LocalBlockSource(tmp_path / "a", broker_id=1))
    b = ProducerIdManager(LocalBlockSource(tmp_path / "b", broker_id=2))
    ids_a = {a.generate_producer_id() for _ in range(2500)}
    ids_b = {b.generate_producer_id() for _ in range(2500)}
    assert len(ids_a) == len(ids_b) == 2500 and not ids_a & ids_b


def test_block_is_written_before_it_is_used(tmp_path):
    path = tmp_path / "f"
    manager = ProducerIdManager(LocalBlockSource(path, broker_id=0, block_size=100))
    first = manager.generate_producer_id()
    assert path.read_text() == f"v1 {first + 100}\n"


# -- blocks from the controller (RPCProducerIdManager), on MockTime ---------------------------


@pytest.fixture
def rpc():
    time, controller = MockTime(), ScriptedController()
    manager = RPCProducerIdManager(broker_id=3, time=time, channel=controller, broker_epoch=lambda: 21,
                                   wait_timeout_ms=5000)
    yield manager, controller, time
    manager.close()


def block(sent, start: int, length: int = 10) -> None:
    assert sent.api_key == ApiKey.ALLOCATE_PRODUCER_IDS and sent.body == {"broker_id": 3, "broker_epoch": 21}
    sent.answer({"error_code": 0, "producer_id_start": start, "producer_id_len": length})


async def test_ids_wait_for_the_first_block_then_the_next_is_fetched_before_the_current_runs_out(rpc):
    manager, controller, _time = rpc
    got = []
    manager.generate(lambda error, pid: got.append((error, pid)))
    manager.generate(lambda error, pid: got.append((error, pid)))
    await settle()
    assert got == [] and len(controller.pending) == 1  # one request for both waiters
    block(controller.only_pending(), 100)
    await settle()
    assert got == [(0, 100), (0, 101)]
    for _ in range(6):
        manager.generate(lambda error, pid: got.append((error, pid)))
    await settle()
    assert controller.pending == []  # 8 of 10 used
    manager.generate(lambda error, pid: got.append((error, pid)))  # the 9th: 90% used, the next block is asked for
    await settle()
    block(controller.only_pending(), 500)
    await settle()
    for _ in range(3):
        manager.generate(lambda error, pid: got.append((error, pid)))
    assert [pid for _e, pid in got] == list(range(100, 110)) + [500, 501]
    assert manager.blocks_received == 2


async def test_without_an_answer_waiters_get_coordinator_load_in_progress_and_asking_goes_on(rpc):
    manager, controller, time = rpc
    got = []
    manager.generate(lambda error, pid: got.append((error, pid)))
    await settle()
    controller.only_pending().fail(KafkaConnectionError("no controller"))
    await settle()
    time.sleep(50)
    await settle()
    controller.only_pending().answer({"error_code": ErrorCode.STALE_BROKER_EPOCH, "producer_id_start": -1,
                                      "producer_id_len": 0})
    await settle()
    time.sleep(4950)
    await settle()
    assert got == [(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1)]  # retriable for clients
    pending = controller.pending
    assert len(pending) == 1  # retried after 50, then 100 ms, ... and still asking
    block(pending[0], 7000)
    await settle()
    manager.generate(lambda error, pid: got.append((error, pid)))
    assert got[-1] == (ErrorCode.NONE, 7000)
