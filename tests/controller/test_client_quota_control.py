"""ClientQuotaControlManager on its own (AlterClientQuotas' validation as Kafka's newest
ClientQuotaControlManager answers it, records only for changes, DescribeClientQuotas'
filters), and inside the QuorumController on MockTime: the quotas kept across a reload and
a snapshot, validate_only writing nothing."""

from __future__ import annotations

import pytest

from controller.client_quota_control import ClientQuotaControlManager, describe, entity_of
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode as E

from .helpers import Harness, request


def alter(*entries, validate_only=False):
    """``entries``: ({type: name}, {key: value or None (remove)})."""
    return request(ApiKey.ALTER_CLIENT_QUOTAS, 1, validate_only=validate_only, entries=[
        {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity.items()],
         "ops": [{"key": k, "value": 0.0 if v is None else v, "remove": v is None} for k, v in ops.items()]}
        for entity, ops in entries])


def alter_raw(entity_pairs, ops):
    return request(ApiKey.ALTER_CLIENT_QUOTAS, 1, validate_only=False, entries=[
        {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity_pairs],
         "ops": [{"key": k, "value": v, "remove": False} for k, v in ops]}])


def apply(manager, req):
    result = manager.alter_client_quotas(req.entries)
    for r in result.records:
        manager.replay(r)
    return result


@pytest.mark.parametrize("pairs,ops,message", [
    ([("user", "alice")], [("producer_byte_rate", 1024.0)], None),
    ([("user", None), ("client-id", "c")], [("request_percentage", 12.5)], None),
    ([("client-id", None)], [("consumer_byte_rate", 2048.0)], None),
    ([], [("producer_byte_rate", 1.0)], "Invalid empty client quota entity"),
    ([("user", "a"), ("user", "b")], [("producer_byte_rate", 1.0)], "duplicate entity entry user"),
    ([("group", "g")], [("producer_byte_rate", 1.0)], "Unhandled client quota entity type: group"),
    ([("user", "")], [("producer_byte_rate", 1.0)], "Empty user not supported"),
    ([("ip", "1.2.3.4"), ("user", "a")], [("connection_creation_rate", 1.0)], "IP entity should not be combined"),
    ([("ip", "1.2.3.4")], [("connection_creation_rate", 1.0)], "not supported by kbroker"),
    ([("user", "a")], [("fetch_byte_rate", 1.0)], "Invalid configuration key fetch_byte_rate"),
    ([("user", "a")], [("producer_byte_rate", 0.0)], "must be greater than 0"),
    ([("user", "a")], [("request_percentage", -1.0)], "must be greater than 0"),
    ([("user", "a")], [("producer_byte_rate", 1024.5)], "cannot be a fractional value"),
    ([("user", "a")], [("producer_byte_rate", 2.0**64)], "too large for a LONG"),
    ([("user", "a")], [("controller_mutation_rate", 10.0)], "KIP-599) is not supported"),
    ([("user", "a")], [("producer_byte_rate", 1.0), ("producer_byte_rate", 2.0)], "Ignoring duplicate entity"),
])
def test_alter_validation(pairs, ops, message):
    manager = ClientQuotaControlManager()
    result = manager.alter_client_quotas(alter_raw(pairs, ops).entries)
    [entry] = result.response
    if message is None:
        assert entry["error_code"] == E.NONE and len(result.records) == len(ops)
    else:
        assert entry["error_code"] == E.INVALID_REQUEST and message in entry["error_message"]
        assert result.records == []


def test_records_only_for_changes_and_removals_of_what_is_set():
    m = ClientQuotaControlManager()
    apply(m, alter(({"user": "alice"}, {"producer_byte_rate": 1e6, "consumer_byte_rate": 2e6})))
    assert m.quotas == {entity_of([("user", "alice")]): {"producer_byte_rate": 1e6, "consumer_byte_rate": 2e6}}
    again = m.alter_client_quotas(alter(({"user": "alice"}, {"producer_byte_rate": 1e6, "request_percentage": None}))
                                  .entries)
    assert again.records == [] and again.response[0]["error_code"] == E.NONE
    apply(m, alter(({"user": "alice"}, {"producer_byte_rate": None, "consumer_byte_rate": None})))
    assert m.quotas == {}


def test_one_bad_entity_leaves_the_others_applied_and_a_repeated_entity_is_refused():
    m = ClientQuotaControlManager()
    result = apply(m, alter(({"user": "a"}, {"producer_byte_rate": 10.0}),
                            ({"user": "b"}, {"producer_byte_rate": -5.0}),
                            ({"client-id": "c"}, {"consumer_byte_rate": 7.0}),
                            ({"client-id": "c"}, {"consumer_byte_rate": 8.0})))
    codes = {tuple((e["entity_type"], e["entity_name"]) for e in r["entity"]): r["error_code"]
             for r in result.response}
    assert codes == {(("user", "a"),): E.NONE, (("user", "b"),): E.INVALID_REQUEST,
                     (("client-id", "c"),): E.INVALID_REQUEST}
    # Kafka's: what the first mention of a repeated entity asked is applied
    assert m.quotas == {entity_of([("user", "a")]): {"producer_byte_rate": 10.0},
                        entity_of([("client-id", "c")]): {"consumer_byte_rate": 7.0}}


def components(*cs):
    return request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, strict=False, components=[
        {"entity_type": t, "match_type": mt, "match": m} for t, mt, m in cs]).components


def described(quotas, cs, strict=False):
    code, message, entries = describe(quotas, components(*cs), strict)
    assert code == E.NONE, message
    return sorted((tuple((e["entity_type"], e["entity_name"]) for e in entry["entity"]) for entry in entries),
                  key=lambda pairs: [(t, n or "") for t, n in pairs])


def test_describe_filters():
    m = ClientQuotaControlManager()
    apply(m, alter(({"user": "alice"}, {"producer_byte_rate": 1.0}),
                   ({"user": None}, {"producer_byte_rate": 2.0}),
                   ({"user": "alice", "client-id": "app"}, {"producer_byte_rate": 3.0}),
                   ({"client-id": None}, {"consumer_byte_rate": 4.0})))
    q = m.quotas
    assert described(q, [("user", 0, "alice")]) == [(("client-id", "app"), ("user", "alice")), (("user", "alice"),)]
    assert described(q, [("user", 0, "alice")], strict=True) == [(("user", "alice"),)]
    assert described(q, [("user", 1, None)]) == [(("user", None),)]
    assert described(q, [("user", 2, None)], strict=True) == [(("user", None),), (("user", "alice"),)]
    assert described(q, [("client-id", 2, None)]) == [(("client-id", None),), (("client-id", "app"), ("user", "alice"))]
    assert len(described(q, [])) == 4 and described(q, [], strict=True) == []
    for bad in ([("user", 0, "a"), ("user", 2, None)], [("ip", 2, None), ("user", 2, None)], [("group", 2, None)],
                [("user", 0, None)]):
        code, _message, entries = describe(q, components(*bad), False)
        assert code == E.INVALID_REQUEST and entries is None


# -- in the QuorumController ---------------------------------------------------------------

async def test_quotas_are_kept_across_a_reload_and_a_snapshot(tmp_path):
    h = await Harness(tmp_path).start()
    body = await h.controller.alter_client_quotas(alter(({"user": "alice"}, {"producer_byte_rate": 1048576.0}),
                                                        validate_only=True))
    assert body["entries"][0]["error_code"] == E.NONE and h.controller.quotas.quotas == {}
    await h.controller.alter_client_quotas(alter(({"user": "alice"}, {"producer_byte_rate": 1048576.0}),
                                                 ({"client-id": None}, {"request_percentage": 50.0})))
    live = h.controller.state_summary()["quotas"]
    assert live == {entity_of([("user", "alice")]): {"producer_byte_rate": 1048576.0},
                    entity_of([("client-id", None)]): {"request_percentage": 50.0}}
    await h.stop()

    h = await Harness(tmp_path).start()  # replayed from the log
    assert h.controller.state_summary()["quotas"] == live
    await h.controller.alter_client_quotas(alter(({"client-id": None}, {"request_percentage": None})))
    offset = await h.controller.snapshot_now()
    await h.stop()

    h = await Harness(tmp_path).start()  # from the snapshot
    try:
        assert h.controller.loaded_snapshot_offset == offset
        assert h.controller.state_summary()["quotas"] == {entity_of([("user", "alice")]): {"producer_byte_rate": 1048576.0}}
        body = await h.controller.describe_client_quotas(request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, strict=False,
                                                                 components=[]))
        assert body["entries"] == [{"entity": [{"entity_type": "user", "entity_name": "alice"}],
                                    "values": [{"key": "producer_byte_rate", "value": 1048576.0}]}]
    finally:
        await h.stop()


async def test_quotas_reach_every_broker_in_full_and_incremental_states(tmp_path):
    from broker.security.credentials import CredentialCache
    from broker.security.metadata import SecurityMetadata
    from controller.channel_manager import UpdateMetadataItem

    def broker_quotas(items) -> dict:
        sm = SecurityMetadata(None, CredentialCache())
        changes = []
        sm.on_quotas_changed = lambda: changes.append(1)
        for item in items:
            if isinstance(item, UpdateMetadataItem):
                sm.apply(item.records, item.full)
        return sm.client_quotas if changes else {"never told": {}}

    h = await Harness(tmp_path).start()
    try:
        await h.start_brokers(1, 2)
        await h.controller.alter_client_quotas(alter(({"user": "alice"}, {"producer_byte_rate": 1e6}),
                                                     ({"client-id": None}, {"consumer_byte_rate": 5e5})))
        await h.controller.alter_client_quotas(alter(({"client-id": None}, {"consumer_byte_rate": None})))
        expected = {entity_of([("user", "alice")]): {"producer_byte_rate": 1e6}}
        for broker in (1, 2):
            assert broker_quotas(h.channel.queues[broker]) == expected
        # a broker registering now gets them in its full state
        h.channel.clear()
        await h.register(3)
        full = [i for i in h.channel.queues[3] if isinstance(i, UpdateMetadataItem)]
        assert [i.full for i in full] == [True] and broker_quotas(full) == expected
    finally:
        await h.stop()
