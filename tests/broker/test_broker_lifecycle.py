"""BrokerLifecycleManager on MockTime against a scripted controller: cluster id, registration,
heartbeat cadence (10 ms while starting, the interval once running), fencing and unfencing,
retries after failures, controlled shutdown."""

from __future__ import annotations

import uuid

import pytest

from broker.broker_lifecycle import BrokerLifecycleManager, BrokerState, Listener
from protocol.api_keys import ApiKey
from protocol.client import KafkaConnectionError
from protocol.clock import MockTime
from protocol.errors import ErrorCode

from .controller_fakes import ScriptedController, settle

INTERVAL_MS = 2000


@pytest.fixture
def time():
    return MockTime()


@pytest.fixture
def controller():
    return ScriptedController()


def manager(time, controller, cluster_id: str | None = "c1", **kw) -> BrokerLifecycleManager:
    return BrokerLifecycleManager(broker_id=4, time=time, channel=controller, listeners=[
        Listener("PLAINTEXT", "127.0.0.1", 9094), Listener("EXTERNAL", "h", 19094)], rack="r1",
        cluster_id=cluster_id, heartbeat_interval_ms=INTERVAL_MS, **kw)


def heartbeat_answer(fenced=True, caught_up=False, should_shut_down=False, error=ErrorCode.NONE) -> dict:
    return {"error_code": error, "is_caught_up": caught_up, "is_fenced": fenced, "should_shut_down": should_shut_down}


async def tick(time, ms: float) -> None:
    """Move the clock by ``ms`` and let what comes due run, including what it schedules at once."""
    time.sleep(ms)
    await settle()
    time.sleep(0)
    await settle()


async def register(time, controller, m, epoch=7) -> None:
    m.start()
    await tick(time, 0)
    controller.only_pending().answer({"error_code": 0, "broker_epoch": epoch})
    await tick(time, 0)


async def test_learns_the_cluster_id_then_registers_then_heartbeats_at_once(time, controller):
    learned = []
    m = manager(time, controller, cluster_id=None, on_cluster_id=learned.append)
    m.start()
    assert controller.sent == []  # nothing before the timer fires
    await tick(time, 0)
    ask = controller.only_pending()
    assert ask.api_key == ApiKey.METADATA
    ask.answer({"brokers": [], "cluster_id": "the-cluster", "controller_id": 3000, "topics": []})
    await tick(time, 0)
    assert learned == ["the-cluster"] and m.cluster_id == "the-cluster"
    reg = controller.only_pending()
    assert reg.api_key == ApiKey.BROKER_REGISTRATION
    assert (reg.body["broker_id"], reg.body["cluster_id"], reg.body["rack"]) == (4, "the-cluster", "r1")
    assert isinstance(reg.body["incarnation_id"], uuid.UUID) and reg.body["incarnation_id"] == m.incarnation_id
    assert [(x["name"], x["host"], x["port"]) for x in reg.body["listeners"]] == [
        ("PLAINTEXT", "127.0.0.1", 9094), ("EXTERNAL", "h", 19094)]
    reg.answer({"error_code": 0, "broker_epoch": 42})
    await tick(time, 0)
    hb = controller.only_pending()  # the first heartbeat goes at once
    assert hb.api_key == ApiKey.BROKER_HEARTBEAT
    assert (hb.body["broker_id"], hb.body["broker_epoch"], hb.body["want_fence"], hb.body["want_shut_down"]) == (
        4, 42, False, False)
    assert m.registered and m.state == BrokerState.STARTING


async def test_every_process_start_is_a_new_incarnation(time, controller):
    assert manager(time, controller).incarnation_id != manager(time, controller).incarnation_id


async def test_heartbeats_every_10_ms_until_unfenced_then_every_interval(time, controller):
    m = manager(time, controller)
    await register(time, controller, m)
    controller.only_pending().answer(heartbeat_answer(fenced=True, caught_up=False))
    await tick(time, 0)
    await tick(time, 9)
    assert controller.pending == []
    await tick(time, 1)
    controller.only_pending().answer(heartbeat_answer(fenced=True, caught_up=True))  # caught up: RECOVERY
    await tick(time, 0)
    assert m.state == BrokerState.RECOVERY and m.initial_catch_up.done() and not m.initial_unfence.done()
    await tick(time, 10)
    controller.only_pending().answer(heartbeat_answer(fenced=False, caught_up=True))
    await tick(time, 0)
    assert m.state == BrokerState.RUNNING and m.initial_unfence.done() and not m.fenced
    sent = len(controller.sent)
    await tick(time, INTERVAL_MS - 1)
    assert len(controller.sent) == sent
    await tick(time, 1)
    controller.only_pending().answer(heartbeat_answer(fenced=False, caught_up=True))
    await tick(time, 0)
    await tick(time, INTERVAL_MS)
    assert len(controller.pending) == 1 and len(controller.sent) == sent + 2


async def test_a_running_broker_fenced_by_the_controller_heartbeats_sooner_until_unfenced(time, controller):
    m = manager(time, controller)
    await register(time, controller, m)
    controller.only_pending().answer(heartbeat_answer(fenced=False, caught_up=True))
    await tick(time, 0)
    assert m.state == BrokerState.RUNNING
    await tick(time, INTERVAL_MS)
    controller.only_pending().answer(heartbeat_answer(fenced=True, caught_up=False))  # its session lapsed
    await tick(time, 0)
    assert m.fenced
    await tick(time, 99)
    assert controller.pending == []
    await tick(time, 1)
    controller.only_pending().answer(heartbeat_answer(fenced=False, caught_up=True))
    await tick(time, 0)
    assert not m.fenced
    await tick(time, 100)
    assert controller.pending == []  # back to the interval


async def test_failures_are_retried_after_the_heartbeat_interval(time, controller):
    m = manager(time, controller)
    m.start()
    await tick(time, 0)
    controller.only_pending().fail(KafkaConnectionError("refused"))
    await tick(time, 0)
    await tick(time, INTERVAL_MS - 1)
    assert controller.pending == []
    await tick(time, 1)
    controller.only_pending().answer({"error_code": ErrorCode.INCONSISTENT_CLUSTER_ID, "broker_epoch": -1})
    await tick(time, 0)
    assert not m.registered
    await tick(time, INTERVAL_MS)
    controller.only_pending().answer({"error_code": 0, "broker_epoch": 3})
    await tick(time, 0)
    assert m.registered and m.broker_epoch == 3
    controller.only_pending().answer(heartbeat_answer(error=ErrorCode.STALE_BROKER_EPOCH))
    await tick(time, 0)
    await tick(time, 10)
    assert controller.pending == []  # an error answer is a failure: the interval, not the startup cadence
    await tick(time, INTERVAL_MS - 10)
    assert controller.only_pending().api_key == ApiKey.BROKER_HEARTBEAT


async def test_controlled_shutdown_heartbeats_want_shut_down_until_the_controller_agrees(time, controller):
    m = manager(time, controller)
    await register(time, controller, m)
    controller.only_pending().answer(heartbeat_answer(fenced=False, caught_up=True))
    await tick(time, 0)
    done = m.begin_controlled_shutdown()
    assert m.state == BrokerState.PENDING_CONTROLLED_SHUTDOWN
    await tick(time, 0)  # at once, not at the next interval
    hb = controller.only_pending()
    assert hb.body["want_shut_down"] is True
    hb.answer(heartbeat_answer(fenced=False, caught_up=True))  # leaderships are being moved
    await tick(time, 0)
    assert not done.done()
    await tick(time, 49)
    assert controller.pending == []
    await tick(time, 1)
    controller.only_pending().answer(heartbeat_answer(fenced=True, caught_up=True, should_shut_down=True))
    await tick(time, 0)
    assert done.done() and m.state == BrokerState.SHUTTING_DOWN
    await tick(time, 10 * INTERVAL_MS)
    assert controller.pending == []  # no more heartbeats


async def test_shutdown_asked_while_a_heartbeat_is_in_flight_goes_right_after_its_answer(time, controller):
    m = manager(time, controller)
    await register(time, controller, m)
    in_flight = controller.only_pending()
    m.begin_controlled_shutdown()
    await tick(time, 0)
    assert controller.pending == [in_flight]  # one request at a time
    in_flight.answer(heartbeat_answer(fenced=True, caught_up=False))
    await tick(time, 0)
    await tick(time, 0)
    assert controller.only_pending().body["want_shut_down"] is True


async def test_a_broker_that_never_registered_shuts_down_at_once(time, controller):
    m = manager(time, controller)
    m.start()
    done = m.begin_controlled_shutdown()
    assert done.done()
    m.close()
    await tick(time, 10 * INTERVAL_MS)
    assert all(s.api_key != ApiKey.BROKER_HEARTBEAT for s in controller.sent)
