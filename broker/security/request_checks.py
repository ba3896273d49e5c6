"""The authorization of the admin requests the controller decides (Kafka's ControllerApis and
AclApis), shared by the broker, which forwards them, and the controller, which answers them.

Where each check runs: kbroker's brokers forward requests to the controller as they came, over
their own connection, without Kafka's Envelope (which carries the client's principal to the
controller). So a broker runs the controller's checks itself, with the client's principal and
its own copy of the ACLs (replayed from the controller's records, like Kafka's brokers), before
forwarding what is allowed; the controller trusts requests from principals that hold
CLUSTER_ACTION on the cluster (brokers: super users, or granted it) and checks those of any
other principal (a client talking to the controller listener directly) the same way.

``screen(api_key, request, authorize)`` returns what to do with a request:

* ``Screen.error``: the whole request is refused with that code (ElectLeaders, CreateAcls,
  DeleteAcls, AlterUserScramCredentials, AlterPartitionReassignments, UnregisterBroker need ALTER
  on the cluster, ListPartitionReassignments DESCRIBE, AlterClientQuotas ALTER_CONFIGS);
* else ``Screen.request`` is the request with the refused entries taken out (the same object,
  changed in place; None when nothing is left to send), and ``Screen.complete(response)``
  (None when nothing was refused) puts the refused entries back into the answer, in the
  request's order.

``authorize(operation, resource_type, name, log_if_denied=True) -> bool``.
"""

from __future__ import annotations

import uuid
from typing import Any, Callable, NamedTuple

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

from .authorizer import CLUSTER_NAME, ERROR_MESSAGES, AclOperation as Op, ResourceType as R

Authorize = Callable[..., bool]

ZERO_UUID = uuid.UUID(int=0)
CONFIG_TOPIC = 2
CONFIG_BROKER = 4
TOPIC_AUTH = ErrorCode.TOPIC_AUTHORIZATION_FAILED
CLUSTER_AUTH = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


class Screen(NamedTuple):
    request: Any = None
    complete: Callable[[Any], Any] | None = None  # None: nothing refused, the answer is as it comes
    error: int | None = None


# The APIs refused whole without an operation on the cluster: ALTER (Kafka's ControllerApis for
# ElectLeaders, the ACL and SCRAM APIs, AlterPartitionReassignments, UnregisterBroker), DESCRIBE
# (ListPartitionReassignments), ALTER_CONFIGS (AlterClientQuotas), DESCRIBE_CONFIGS (DescribeClientQuotas).
CLUSTER_OPERATION_APIS: dict[int, int] = {
    ApiKey.ELECT_LEADERS: Op.ALTER, ApiKey.CREATE_ACLS: Op.ALTER, ApiKey.DELETE_ACLS: Op.ALTER,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: Op.ALTER, ApiKey.ALTER_PARTITION_REASSIGNMENTS: Op.ALTER,
    ApiKey.UNREGISTER_BROKER: Op.ALTER, ApiKey.LIST_PARTITION_REASSIGNMENTS: Op.DESCRIBE,
    ApiKey.ALTER_CLIENT_QUOTAS: Op.ALTER_CONFIGS, ApiKey.DESCRIBE_CLIENT_QUOTAS: Op.DESCRIBE_CONFIGS,
}
CLUSTER_ALTER_APIS = frozenset(k for k, op in CLUSTER_OPERATION_APIS.items() if op == Op.ALTER)


def screen(api_key: int, request: Any, authorize: Authorize,
           topic_exists: Callable[[str], bool] = lambda name: True) -> Screen:
    operation = CLUSTER_OPERATION_APIS.get(api_key)
    if operation is not None:
        if not authorize(operation, R.CLUSTER, CLUSTER_NAME):
            return Screen(error=CLUSTER_AUTH)
        return Screen(request)
    if api_key == ApiKey.CREATE_PARTITIONS:
        return _by_topic(request, "topics", "results", _allowed(authorize, Op.ALTER, _names(request.topics)),
                         lambda name: {"name": name, "error_code": TOPIC_AUTH, "error_message": None})
    if api_key == ApiKey.CREATE_TOPICS:
        if authorize(Op.CREATE, R.CLUSTER, CLUSTER_NAME, False):
            return Screen(request)
        return _by_topic(request, "topics", "topics", _allowed(authorize, Op.CREATE, _names(request.topics)),
                         lambda name: {"name": name, "topic_id": ZERO_UUID, "error_code": TOPIC_AUTH,
                                       "error_message": "Authorization failed.", "num_partitions": -1,
                                       "replication_factor": -1, "configs": None})
    if api_key == ApiKey.DELETE_TOPICS:
        if authorize(Op.DELETE, R.CLUSTER, CLUSTER_NAME, False):
            return Screen(request)
        names = list(dict.fromkeys(request.topic_names))
        allowed = {n for n in names if authorize(Op.DESCRIBE, R.TOPIC, n)
                   and (not topic_exists(n) or authorize(Op.DELETE, R.TOPIC, n))}
        refused = [n for n in names if n not in allowed]
        if not refused:
            return Screen(request)
        request.topic_names = [n for n in request.topic_names if n in allowed]

        def complete_delete(response: Any) -> Any:
            got = {r["name"]: r for r in response["responses"]}
            response["responses"] = [got[n] if n in got else {
                "name": n, "error_code": TOPIC_AUTH, "error_message": ERROR_MESSAGES[TOPIC_AUTH]} for n in names]
            return response
        return Screen(request if request.topic_names else None, complete_delete)
    if api_key in (ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.ALTER_CONFIGS):
        return _config_resources(request, "responses", Op.ALTER_CONFIGS, authorize,
                                 lambda r, code: {"error_code": code, "error_message": ERROR_MESSAGES[code],
                                                  "resource_type": r.resource_type, "resource_name": r.resource_name})
    if api_key == ApiKey.DESCRIBE_CONFIGS:
        return _config_resources(request, "results", Op.DESCRIBE_CONFIGS, authorize,
                                 lambda r, code: {"error_code": code, "error_message": ERROR_MESSAGES[code],
                                                  "resource_type": r.resource_type, "resource_name": r.resource_name,
                                                  "configs": []})
    return Screen(request)


def _names(items: Any) -> list[str]:
    return list(dict.fromkeys(t.name for t in items))


def _allowed(authorize: Authorize, op: int, names: list[str]) -> set[str]:
    return {n for n in names if authorize(op, R.TOPIC, n)}


def _by_topic(request: Any, field: str, out_field: str, allowed: set[str], refused_entry: Callable[[str], dict]
              ) -> Screen:
    """Topics not in ``allowed`` taken out of ``request[field]``, answered ``refused_entry``."""
    entries = list(request[field])
    if all(t.name in allowed for t in entries):
        return Screen(request)
    order = [t.name for t in entries]
    request[field] = [t for t in entries if t.name in allowed]

    def complete(response: Any) -> Any:
        got: dict[str, list] = {}
        for r in response[out_field]:
            got.setdefault(r["name"], []).append(r)
        out = []
        for name in order:
            if name not in allowed:
                out.append(refused_entry(name))
            elif got.get(name):
                out.append(got[name].pop(0))
        response[out_field] = out
        return response
    return Screen(request if request[field] else None, complete)


def _config_resources(request: Any, out_field: str, op: int, authorize: Authorize,
                      refused_entry: Callable[[Any, int], dict]) -> Screen:
    """Config resources: a topic needs ``op`` on it (TOPIC_AUTHORIZATION_FAILED), a broker
    ``op`` on the cluster (CLUSTER_AUTHORIZATION_FAILED). A resource listed twice is left to
    the controller, which refuses it as a duplicate."""
    resources = list(request.resources)
    keys = [(r.resource_type, r.resource_name) for r in resources]
    refused: dict[int, int] = {}  # index -> code
    for i, r in enumerate(resources):
        if keys.count(keys[i]) > 1:
            continue
        if r.resource_type == CONFIG_TOPIC and not authorize(op, R.TOPIC, r.resource_name):
            refused[i] = TOPIC_AUTH
        elif r.resource_type == CONFIG_BROKER and not authorize(op, R.CLUSTER, CLUSTER_NAME):
            refused[i] = CLUSTER_AUTH
    if not refused:
        return Screen(request)
    request.resources = [r for i, r in enumerate(resources) if i not in refused]

    def complete(response: Any) -> Any:
        got = list(response[out_field])
        out = []
        for i, r in enumerate(resources):
            if i in refused:
                out.append(refused_entry(r, refused[i]))
            elif got:
                out.append(got.pop(0))
        response[out_field] = out
        return response
    return Screen(request if request.resources else None, complete)


def broker_resources_of_others(request: Any, broker_id: int) -> Screen:
    """IncrementalAlterConfigs / AlterConfigs: a BROKER resource naming a broker goes to that
    broker (Kafka's ConfigAdminManager.preprocess): another id, or a name that is no integer, is
    INVALID_REQUEST here and not forwarded; the cluster-wide default ("") goes through any broker."""
    resources = list(request.resources)
    refused: dict[int, str] = {}
    for i, r in enumerate(resources):
        if r.resource_type != CONFIG_BROKER or r.resource_name == "":
            continue
        try:
            node = int(r.resource_name)
        except ValueError:
            refused[i] = f"Node id must be an integer, but it is: {r.resource_name}"
            continue
        if node != broker_id:
            refused[i] = f"Unexpected broker id, expected {broker_id}, but received {r.resource_name}"
    if not refused:
        return Screen(request)
    request.resources = [r for i, r in enumerate(resources) if i not in refused]

    def complete(response: Any) -> Any:
        got = list(response["responses"])
        out = []
        for i, r in enumerate(resources):
            if i in refused:
                out.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": refused[i],
                            "resource_type": r.resource_type, "resource_name": r.resource_name})
            elif got:
                out.append(got.pop(0))
        response["responses"] = out
        return response
    return Screen(request if request.resources else None, complete)


def empty_response(api_key: int) -> dict:
    """The answer to a request with nothing left to send (everything refused), before
    ``Screen.complete`` adds the refused entries."""
    field = {ApiKey.CREATE_PARTITIONS: "results", ApiKey.CREATE_TOPICS: "topics", ApiKey.DELETE_TOPICS: "responses",
             ApiKey.INCREMENTAL_ALTER_CONFIGS: "responses", ApiKey.ALTER_CONFIGS: "responses",
             ApiKey.DESCRIBE_CONFIGS: "results"}[api_key]
    return {"throttle_time_ms": 0, field: []}
