"""The controller's metrics on a MockTime (tests/controller/helpers.Harness): brokers active and
fenced, topics and partitions, offline partitions, leader elections and the event queue, each
moving when its event happens."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from controller.metrics import ControllerCollector
from tests.controller.helpers import Harness


@pytest.fixture
async def h(tmp_path):
    harness = await Harness(tmp_path).start()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ControllerCollector(lambda: harness.controller))
    harness.registry = registry
    yield harness
    await harness.stop()


def value(h, name, **labels):
    return h.registry.get_sample_value(name, labels)


P = "kafka_controller_kafkacontroller_"


async def test_brokers_partitions_elections_and_fencing_move_the_controllers_metrics(h):
    assert value(h, P + "activecontrollercount") == 1
    assert value(h, P + "activebrokercount") == 0
    await h.start_brokers(1, 2)
    assert value(h, P + "activebrokercount") == 2 and value(h, P + "fencedbrokercount") == 0
    await h.create(("t", 2, 2))
    assert value(h, P + "globaltopiccount") == 1 and value(h, P + "globalpartitioncount") == 2
    assert value(h, P + "offlinepartitionscount") == 0
    elections = value(h, "kafka_controller_controllerstats_leaderelections_total")
    assert value(h, "kafka_controller_controllereventmanager_eventqueuetime_seconds_count") > 0
    assert value(h, P + "lastappliedrecordoffset") > 0 and value(h, P + "metadatalogsize_bytes") > 0
    await h.advance(9000)  # neither heartbeats: both fenced, the partitions lose their leaders
    assert value(h, P + "fencedbrokercount") == 2 and value(h, P + "activebrokercount") == 0
    assert value(h, P + "offlinepartitionscount") == 2
    # Fenced one at a time: the first one's leaderships moved to the other (elections), then
    # the second one's partitions went offline (no election).
    moved = value(h, "kafka_controller_controllerstats_leaderelections_total")
    assert elections < moved <= elections + 2
    for _ in range(2):  # both back and unfenced: the last ISR member leads both partitions again
        await h.heartbeat_all(1, 2)
    assert value(h, P + "offlinepartitionscount") == 0
    assert value(h, "kafka_controller_controllerstats_leaderelections_total") == moved + 2
    assert value(h, "kafka_controller_controllerstats_uncleanleaderelections_total") == 0


async def test_a_stopped_controller_reports_itself_inactive(h):
    await h.controller.stop()
    assert value(h, P + "activecontrollercount") == 0
