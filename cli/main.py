"""``kbroker``: run a broker, and talk to any Kafka-protocol broker (kbroker or Apache Kafka).

    kbroker serve [-c server.properties] [--override key=value ...]
    kbroker controller [-c controller.properties] [--override key=value ...]
    kbroker storage format -c FILE -t CLUSTER_ID [--add-scram 'SCRAM-SHA-512=[name=N,password=P]'] | random-uuid
    kbroker topics create|list|describe|delete ...
    kbroker produce -t TOPIC [-f FILE] ...
    kbroker consume -t TOPIC [--from-beginning | --offset N | --timestamp T | --end | -g GROUP] ...
    kbroker groups list | describe -g G | delete -g G | reset-offsets -g G -t T --to-... [--execute]
    kbroker transactions list | describe --transactional-id ID | describe-producers | find-hanging | abort ...
    kbroker acls add|list|remove [--allow-principal User:A] [--operation Read] [--topic T] ...
    kbroker users scram set|delete|list -u USER [--add-config 'SCRAM-SHA-256=[password=...]']
    kbroker quotas set|describe [--user U | --user-defaults] [--client-id C | --client-defaults] ...
    kbroker metadata [-t TOPIC ...] [--metrics HOST:PORT ...]
    kbroker cluster up|status|down [--dir DIR] ...   kbroker cluster elect-leaders [-t TOPIC] ...
    kbroker health [-b HOST:PORT] [--timeout-ms MS]
    kbroker dump-log FILE [--print-records]
    kbroker certs [--dir DIR] [--broker NAME ...] [--client NAME ...] [--pkcs12 PASSWORD]
    kbroker record --listen HOST:PORT --upstream HOST:PORT --out DIR
    kbroker loadgen synth|replay|demo ...
    kbroker sim --seed S [--trace] | --seeds N [--first F] [-j J] [--bug NAME]

This module holds the argument parser and the dispatch; each command group lives in its own
module (``cli.serve``, ``cli.topics``, ...). A command names its function as a string,
``"module:function"``, imported only when that command runs, so that the client commands
(which use ``protocol.client`` and nothing but standard protocol behaviour) never load the
broker, and ``serve`` does not pay for the client commands. Adding a command group is one
module plus an ``_add_<group>`` function here, listed in ``COMMAND_GROUPS``.

Data goes to stdout as raw bytes; progress, summaries and errors go to stderr.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from typing import Callable, TypeAlias

import uvloop

from cli.common import BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP, UsageError, client_network
from protocol.client import KafkaClient
from protocol.errors import KafkaError

Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


# ---------------------------------------------------------------------------------------------
# argument types

def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key, value


def _acks(text: str) -> int:
    if text == "all":
        return -1
    if text not in ("0", "1", "-1"):
        raise argparse.ArgumentTypeError("acks must be 0, 1, -1 or all")
    return int(text)


def _isolation_level(text: str) -> int:
    levels = {"0": 0, "read_uncommitted": 0, "1": 1, "read_committed": 1}
    if text not in levels:
        raise argparse.ArgumentTypeError("expected read_uncommitted (0) or read_committed (1)")
    return levels[text]


# ---------------------------------------------------------------------------------------------
# the commands: one _add_<group> per command module

def local_command(commands: Subcommands, name: str, run: str, help: str) -> argparse.ArgumentParser:
    """A command that runs without a broker connection: ``run`` ("module:function") gets the args."""
    sub = commands.add_parser(name, help=help)
    sub.set_defaults(run=run, client=False)
    return sub


def client_command(commands: Subcommands, name: str, run: str, help: str, *,
                   bootstrap_default: str | None = None, bare: bool = False) -> argparse.ArgumentParser:
    """A Kafka client command: takes -b/--bootstrap-server, and ``run`` ("module:function", a
    coroutine function) gets a connected ``KafkaClient`` and the args — or, when ``bare``, only
    the args (it opens its own connections)."""
    sub = commands.add_parser(name, help=help)
    default = os.environ.get(BOOTSTRAP_ENV, bootstrap_default or DEFAULT_BOOTSTRAP)
    sub.add_argument("-b", "--bootstrap-server", default=default,
                     help="host:port[,host:port...] (default $KBROKER_BOOTSTRAP_SERVER or %(default)s)")
    sub.add_argument("--command-config", metavar="FILE",
                     help="Kafka client properties: security.protocol, sasl.mechanism, sasl.jaas.config, ssl.* ...")
    sub.add_argument("-X", dest="property", type=_key_value, action="append", default=[], metavar="KEY=VALUE",
                     help="a client property, as kcat takes them (repeatable; wins over --command-config)")
    sub.set_defaults(run=run, client=True, bare=bare)
    return sub


def _add_serve(commands: Subcommands) -> None:
    serve = local_command(commands, "serve", "cli.serve:run",
                          "run a broker, a controller or both, as process.roles says (default: both)")
    serve.add_argument("-c", "--config", help="server.properties file")
    serve.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                       help="set a configuration key (repeatable)")
    serve.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                       help="stderr logging level (default INFO)")
    serve.add_argument("--logger", action="append", default=[], type=_key_value, metavar="LOGGER=LEVEL",
                       help="one logger's level, as a log4j.logger line sets it (repeatable): "
                            "kbroker.network=DEBUG logs TLS logins, kbroker.authentication=DEBUG SASL ones")


def _add_controller(commands: Subcommands) -> None:
    controller = local_command(commands, "controller", "cli.controller:run", "run a controller")
    controller.add_argument("-c", "--config", help="controller.properties file")
    controller.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                            help="set a configuration key (repeatable)")
    controller.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                            help="stderr logging level (default INFO)")
    controller.add_argument("--logger", action="append", default=[], type=_key_value, metavar="LOGGER=LEVEL",
                            help="one logger's level, as a log4j.logger line sets it (repeatable): "
                                 "kbroker.network=DEBUG logs TLS logins, kbroker.authentication=DEBUG SASL ones")


def _add_storage(commands: Subcommands) -> None:
    storage = commands.add_parser("storage", help="format a node's directories before its first start (kafka-storage)")
    actions = storage.add_subparsers(dest="storage_command", required=True, metavar="ACTION")
    fmt = local_command(actions, "format", "cli.storage:format_storage",
                        "write meta.properties and the bootstrap metadata (SCRAM credentials, KIP-900)")
    fmt.add_argument("-c", "--config", help="the node's server.properties / controller.properties")
    fmt.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                     help="set a configuration key (repeatable)")
    fmt.add_argument("-t", "--cluster-id", required=True, help="the cluster id (`kbroker storage random-uuid`)")
    fmt.add_argument("-S", "--add-scram", action="append", default=[], metavar="SCRAM",
                     help="a SCRAM credential, as kafka-storage: 'SCRAM-SHA-512=[name=alice,password=alice-secret]' "
                          "(also iterations=, salt= and saltedpassword= in base64; repeatable)")
    fmt.add_argument("-g", "--ignore-formatted", action="store_true",
                     help="skip directories formatted already instead of failing")
    local_command(actions, "random-uuid", "cli.storage:random_uuid", "print a new cluster id")


def _add_topics(commands: Subcommands) -> None:
    topics = commands.add_parser("topics", help="create, list, describe or delete topics")
    actions = topics.add_subparsers(dest="topics_command", required=True, metavar="ACTION")
    create = client_command(actions, "create", "cli.topics:create", "create a topic")
    create.add_argument("-t", "--topic", required=True)
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument("--replication-factor", type=int, default=1)
    create.add_argument("--config", type=_key_value, action="append", default=[], metavar="KEY=VALUE")
    create.add_argument("--if-not-exists", action="store_true", help="succeed if the topic exists")
    client_command(actions, "list", "cli.topics:list_names", "list topic names")
    describe = client_command(actions, "describe", "cli.topics:describe", "show partitions and configs")
    describe.add_argument("-t", "--topic", required=True)
    delete = client_command(actions, "delete", "cli.topics:delete", "delete a topic")
    delete.add_argument("-t", "--topic", required=True)
    alter = client_command(actions, "alter", "cli.topics:alter", "add partitions to a topic (CreatePartitions)")
    alter.add_argument("-t", "--topic", required=True)
    alter.add_argument("--partitions", type=int, required=True, help="the topic's new partition count")
    trim = client_command(actions, "trim", "cli.cluster_ops:trim",
                          "delete the records before an offset or a time (DeleteRecords, as kafka-delete-records.sh)")
    trim.add_argument("-t", "--topic", required=True)
    trim.add_argument("-p", "--partition", type=int, action="append", help="only this partition (repeatable)")
    trim.add_argument("--before", type=int, metavar="OFFSET",
                      help="the new first offset of every partition (-1: its high watermark, deleting everything)")
    trim.add_argument("--before-time", metavar="T",
                      help="delete the records before this time (epoch ms or ISO 8601): each partition starts at "
                           "its first record at or after T")


def _add_configs(commands: Subcommands) -> None:
    configs = commands.add_parser("configs", help="describe, set or delete configs of a topic or broker "
                                                  "(as kafka-configs.sh)")
    actions = configs.add_subparsers(dest="configs_command", required=True, metavar="ACTION")

    def entity(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--topic", help="a topic's configs")
        p.add_argument("--broker", type=int, help="a broker's own configs")
        p.add_argument("--broker-defaults", action="store_true", help="the cluster-wide broker defaults")
        return p
    describe = entity(client_command(actions, "describe", "cli.configs:describe",
                                     "each key's value and source (DescribeConfigs)"))
    describe.add_argument("--all", action="store_true", help="defaults too (DEFAULT_CONFIG)")
    set_ = entity(client_command(actions, "set", "cli.configs:set_configs",
                                 "set keys (IncrementalAlterConfigs SET)"))
    set_.add_argument("pairs", type=_key_value, nargs="+", metavar="KEY=VALUE")
    delete = entity(client_command(actions, "delete", "cli.configs:delete_configs",
                                   "remove keys, back to their default (IncrementalAlterConfigs DELETE)"))
    delete.add_argument("keys", nargs="+", metavar="KEY")


def _add_produce(commands: Subcommands) -> None:
    produce = client_command(commands, "produce", "cli.produce:run", "produce one record per input line")
    produce.add_argument("-t", "--topic", required=True)
    produce.add_argument("-f", "--file", help="read lines from FILE instead of stdin")
    produce.add_argument("-K", "--key-separator", metavar="SEP", help="key = the text before the first SEP")
    produce.add_argument("-H", "--header", type=_key_value, action="append", default=[], metavar="KEY=VALUE")
    produce.add_argument("--acks", type=_acks, default=-1, help="0, 1, -1 or all (default all)")
    produce.add_argument("-p", "--partition", type=int)
    produce.add_argument("-z", "--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    produce.add_argument("--linger-ms", type=float, default=5)
    produce.add_argument("--batch-size", type=int, default=16384)
    produce.add_argument("--idempotent", action="store_true", help="enable the idempotent producer (needs acks all)")


def _add_consume(commands: Subcommands) -> None:
    consume = client_command(commands, "consume", "cli.consume:run", "print records")
    consume.add_argument("-t", "--topic", required=True)
    start = consume.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true")
    start.add_argument("--offset", type=int, help="start at this offset")
    start.add_argument("--timestamp", type=int, metavar="T", help="start at the first record at or after T (ms)")
    start.add_argument("--end", action="store_true", help="start at the end (the default)")
    consume.add_argument("-p", "--partition", type=int, help="only this partition (default: all)")
    consume.add_argument("-n", "--max-messages", type=int)
    consume.add_argument("-f", "--format", default="%s\\n", metavar="FMT",
                         help="kcat-style: %%t %%p %%o %%k %%K %%v/%%s %%S %%T %%h \\n \\t %%%% (default %%s\\n)")
    consume.add_argument("--timeout-ms", type=int, help="stop when no record arrived for this long")
    consume.add_argument("-e", "--exit-at-end", action="store_true",
                         help="stop once every partition reached the end offset it had at start (with -g: every "
                         "partition assigned, its end when first assigned; none assigned: at once)")
    consume.add_argument("--isolation-level", type=_isolation_level, default=0,
                         help="read_uncommitted (0, default) or read_committed (1)")
    consume.add_argument("-g", "--group", help="consume as a member of this consumer group: its partitions of the "
                         "topic, from the committed offsets (else the start), committing as it goes and on exit")
    consume.add_argument("--assignor", choices=["range", "roundrobin"], action="append",
                         help="with -g: the partition assignment strategy (repeatable; default range, roundrobin)")


def _add_groups(commands: Subcommands) -> None:
    groups = commands.add_parser("groups", help="list, describe, delete consumer groups; reset their offsets")
    actions = groups.add_subparsers(dest="groups_command", required=True, metavar="ACTION")
    client_command(actions, "list", "cli.groups:list_groups", "list the consumer groups")
    describe = client_command(actions, "describe", "cli.groups:describe",
                              "members, assignment, committed offset, log end offset and lag per partition")
    describe.add_argument("-g", "--group", required=True)
    delete = client_command(actions, "delete", "cli.groups:delete", "delete a group (it must have no members)")
    delete.add_argument("-g", "--group", required=True)
    reset = client_command(actions, "reset-offsets", "cli.groups:reset_offsets",
                           "set a group's committed offsets of a topic (dry run unless --execute)")
    reset.add_argument("-g", "--group", required=True)
    reset.add_argument("-t", "--topic", required=True)
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int, metavar="N", help="N, clamped to each partition's earliest and latest")
    to.add_argument("--to-datetime", metavar="T", help="the first offset at or after T (ISO 8601 or epoch ms)")
    reset.add_argument("--execute", action="store_true", help="commit the new offsets (default: only show them)")


def _acl_resource_options(p: argparse.ArgumentParser, pattern_help: str) -> None:
    p.add_argument("--topic", action="append", metavar="T", help="a topic (repeatable; * for every topic)")
    p.add_argument("--group", action="append", metavar="G", help="a consumer group (repeatable)")
    p.add_argument("--cluster", action="store_true", help="the cluster (kafka-cluster)")
    p.add_argument("--transactional-id", action="append", metavar="X", help="a transactional id (repeatable)")
    p.add_argument("--delegation-token", action="append", metavar="D", help="a delegation token (repeatable)")
    p.add_argument("--resource-pattern-type", metavar="TYPE", help=pattern_help)


def _acl_entry_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-principal", action="append", metavar="User:NAME", help="repeatable; User:* is everyone")
    p.add_argument("--deny-principal", action="append", metavar="User:NAME", help="repeatable")
    p.add_argument("--allow-host", action="append", metavar="HOST", help="repeatable (default * with a principal)")
    p.add_argument("--deny-host", action="append", metavar="HOST", help="repeatable (default * with a principal)")
    p.add_argument("--operation", action="append", metavar="OP",
                   help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, "
                        "IdempotentWrite, CreateTokens, DescribeTokens or All (repeatable; default All)")


def _add_acls(commands: Subcommands) -> None:
    acls = commands.add_parser("acls", help="add, list or remove ACLs (as kafka-acls.sh)")
    actions = acls.add_subparsers(dest="acls_command", required=True, metavar="ACTION")
    add = client_command(actions, "add", "cli.acls:add", "add ACLs")
    _acl_resource_options(add, "literal (default) or prefixed")
    _acl_entry_options(add)
    add.add_argument("--producer", action="store_true",
                     help="WRITE, DESCRIBE, CREATE on the topics (WRITE, DESCRIBE on transactional ids)")
    add.add_argument("--idempotent", action="store_true", help="with --producer: IDEMPOTENT_WRITE on the cluster")
    add.add_argument("--consumer", action="store_true", help="READ, DESCRIBE on the topics, READ on the groups")
    listing = client_command(actions, "list", "cli.acls:list_acls", "list ACLs (every one without resources)")
    _acl_resource_options(listing, "literal (default), prefixed, any or match")
    listing.add_argument("--principal", metavar="User:NAME", help="only this principal's")
    remove = client_command(actions, "remove", "cli.acls:remove", "remove ACLs (every one of the resources "
                                                                   "without principals)")
    _acl_resource_options(remove, "literal (default), prefixed, any or match")
    _acl_entry_options(remove)
    remove.add_argument("--force", action="store_true", help="do not ask for confirmation")


def _add_users(commands: Subcommands) -> None:
    users = commands.add_parser("users", help="SCRAM credentials of users (as kafka-configs.sh --entity-type users)")
    kinds = users.add_subparsers(dest="users_kind", required=True, metavar="KIND")
    scram = kinds.add_parser("scram", help="SCRAM-SHA-256 / SCRAM-SHA-512 credentials")
    actions = scram.add_subparsers(dest="scram_command", required=True, metavar="ACTION")
    set_ = client_command(actions, "set", "cli.users:set_credentials", "set a user's credentials")
    set_.add_argument("-u", "--user", "--entity-name", dest="user", required=True)
    set_.add_argument("--add-config", metavar="'SCRAM-SHA-256=[iterations=8192,password=...]'",
                      help="mechanisms with [iterations=N,password=P] (iterations default 4096)")
    set_.add_argument("--add-config-file", metavar="FILE",
                      help="the same as a properties file, one mechanism a line (kafka-configs.sh's option; "
                           "keeps the password off the command line)")
    delete = client_command(actions, "delete", "cli.users:delete_credentials", "delete a user's credentials")
    delete.add_argument("-u", "--user", "--entity-name", dest="user", required=True)
    delete.add_argument("--delete-config", required=True, metavar="SCRAM-SHA-512[,SCRAM-SHA-256]")
    listing = client_command(actions, "list", "cli.users:list_credentials", "users' mechanisms and iterations")
    listing.add_argument("-u", "--user", "--entity-name", dest="user")


def _add_quotas(commands: Subcommands) -> None:
    quotas = commands.add_parser("quotas", help="client quotas (as kafka-configs.sh --entity-type users|clients)")
    actions = quotas.add_subparsers(dest="quotas_command", required=True, metavar="ACTION")

    def entity_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--user", help="a user principal's name")
        p.add_argument("--user-defaults", action="store_true", help="the default user")
        p.add_argument("--client-id", help="a client id")
        p.add_argument("--client-defaults", action="store_true", help="the default client id")
    set_ = client_command(actions, "set", "cli.quotas:set_quotas", "set or delete an entity's quotas")
    entity_options(set_)
    set_.add_argument("--add-config", metavar="KEY=VALUE[,KEY=VALUE]",
                      help="producer_byte_rate, consumer_byte_rate (bytes/s), request_percentage")
    set_.add_argument("--delete-config", metavar="KEY[,KEY]", help="quotas to remove")
    describe = client_command(actions, "describe", "cli.quotas:describe_quotas",
                              "entities' quotas (every entity with one when none is named)")
    entity_options(describe)


def _add_metadata(commands: Subcommands) -> None:
    metadata = client_command(commands, "metadata", "cli.metadata:run", "show brokers, controller, topics and partitions")
    metadata.add_argument("-t", "--topic", action="append", help="only these topics (repeatable)")
    metadata.add_argument("--metrics", action="append", metavar="HOST:PORT",
                          help="also read this metrics endpoint (metrics.listener) and show its health (repeatable)")


def _reassign_arguments(reassign: argparse.ArgumentParser, decommission_: argparse.ArgumentParser) -> None:
    for mode in ("generate", "execute", "verify", "cancel", "list"):
        reassign.add_argument(f"--{mode}", action="store_true")
    reassign.add_argument("--topics-to-move-json-file", help='{"topics": [{"topic": "T"}], "version": 1}')
    reassign.add_argument("--broker-list", help="the brokers to place replicas on, as 1,2,3 (--generate)")
    reassign.add_argument("--reassignment-json-file", help="a plan (--execute, --verify, --cancel)")
    reassign.add_argument("--additional", action="store_true",
                          help="execute while other reassignments are in progress")
    reassign.add_argument("--throttle", type=int, metavar="BYTES/s",
                          help="replication throttle of the moves (--execute; with --additional: a new rate for "
                               "the moves in progress); --verify clears it once they are done")
    reassign.add_argument("--replica-alter-log-dirs-throttle", type=int, metavar="BYTES/s",
                          help="refused: kbroker has no AlterReplicaLogDirs (KIP-113)")
    reassign.add_argument("--preserve-throttles", action="store_true",
                          help="--verify leaves the throttles in place")
    decommission_.add_argument("--broker", type=int, required=True, help="the broker to empty")
    decommission_.add_argument("--timeout", type=float, default=600, help="seconds to wait (default %(default)s)")
    decommission_.add_argument("--no-unregister", action="store_true",
                               help="stop once the broker is empty (do not wait for it to stop and unregister it)")


def _add_cluster(commands: Subcommands) -> None:
    cluster = commands.add_parser("cluster", help="run a controller and brokers on this machine; leader elections")
    actions = cluster.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    dir_help = "the cluster's directory: data dirs, log files, cluster.json (default ./%(default)s)"
    up = local_command(actions, "up", "cli.cluster:up",
                       "start a controller and N brokers in the background; print the bootstrap list")
    up.add_argument("-n", "--brokers", type=int, help="number of brokers (default 3)")
    up.add_argument("--dir", default="cluster", help=dir_help)
    up.add_argument("--base-port", type=int,
                    help="brokers listen on P, P+1, ..., the controller on P+N (default 9092; 0: any free ports)")
    up.add_argument("--broker-config", type=_key_value, action="append", default=[], metavar="KEY=VALUE",
                    help="a broker configuration key (repeatable)")
    up.add_argument("--controller-config", type=_key_value, action="append", default=[], metavar="KEY=VALUE",
                    help="a controller configuration key (repeatable)")
    up.add_argument("--controllers", type=int, default=None,
                    help="number of controllers (default 1); more than one needs --zookeeper: one is active, "
                         "the others standbys")
    up.add_argument("--zookeeper", nargs="?", const="start", default=None, metavar="CONNECT",
                    help="keep the metadata in ZooKeeper (controller.metadata.store=zookeeper): without a value, "
                         "start a ZooKeeper server of the cluster's own (Debian's package); or host:port[/chroot]")
    up.add_argument("--secure", action="store_true",
                    help="clients on SASL_SSL with SCRAM, mutual TLS between the processes, ACLs on, an admin "
                         "super user; certificates and the admin's client config written under DIR")
    up.add_argument("--timeout", type=float, default=60, help="seconds to wait for every broker (default 60)")
    status = local_command(actions, "status", "cli.cluster:status",
                           "processes, live brokers, under-replicated and offline partitions (exit 1 if unhealthy)")
    status.add_argument("--dir", default="cluster", help=dir_help)
    status.add_argument("--timeout", type=float, default=10, help="seconds to wait for metadata (default 10)")
    down = local_command(actions, "down", "cli.cluster:down",
                         "stop the brokers (controlled shutdown), then the controller")
    down.add_argument("--dir", default="cluster", help=dir_help)
    down.add_argument("--purge", action="store_true", help="then remove the directory and its data")
    down.add_argument("--timeout", type=float, default=60, help="seconds to wait for each process (default 60)")
    _reassign_arguments(
        client_command(actions, "reassign", "cli.reassign:run",
                       "move replicas with kafka-reassign-partitions.sh's plans: --generate, --execute, --verify, "
                       "--cancel, --list"),
        client_command(actions, "decommission", "cli.reassign:decommission",
                       "move every replica off a broker, wait, then unregister it once stopped"))
    balance = client_command(actions, "balance", "cli.balance:run",
                             "even replicas and preferred leaders across the live brokers, racks apart, moving as "
                             "little as it can (--execute: move, wait, elect preferred leaders)")
    balance.add_argument("--execute", action="store_true", help="start the moves, wait, then elect preferred leaders")
    balance.add_argument("-t", "--topic", action="append", help="only these topics (repeatable; default all)")
    balance.add_argument("--exclude-internal", action="store_true",
                         help="leave __consumer_offsets and __transaction_state where they are")
    balance.add_argument("--output-json-file", metavar="F", help="also write the proposed plan to F (JSON)")
    balance.add_argument("--timeout", type=float, default=600, help="seconds to wait for the moves (default %(default)s)")
    balance.add_argument("--no-wait", action="store_true", help="start the moves and return (no election)")
    balance.add_argument("--no-elect", action="store_true", help="no preferred leader election after the moves")
    dirs = client_command(actions, "log-dirs", "cli.cluster_ops:log_dirs",
                          "per broker and log dir: each partition's size and offset lag (DescribeLogDirs)")
    dirs.add_argument("--broker", type=int, action="append", help="only this broker (repeatable; default all)")
    dirs.add_argument("-t", "--topic", action="append", help="only this topic (repeatable)")
    elect = client_command(actions, "elect-leaders", "cli.elect_leaders:run",
                           "preferred (or --unclean) leader election, for a topic or every partition")
    elect.add_argument("-t", "--topic", help="only this topic (default: every partition)")
    elect.add_argument("-p", "--partition", type=int, action="append", help="only this partition (repeatable)")
    elect.add_argument("--unclean", action="store_true",
                       help="unclean election: a leaderless partition gets any live replica (may lose records)")


def _add_health(commands: Subcommands) -> None:
    from cli.entry import own_listener
    health = client_command(commands, "health", "cli.health:run",
                            "exit 0 if the broker or controller answers ApiVersions, 1 if not (the image's HEALTHCHECK)",
                            bootstrap_default=own_listener(os.environ), bare=True)
    health.add_argument("--timeout-ms", type=int, default=5000, help="give up after this long (default %(default)s)")


def _add_dump_log(commands: Subcommands) -> None:
    dump_log = local_command(commands, "dump-log", "cli.dump_log:run", "print the batches of a .log segment file")
    dump_log.add_argument("file")
    dump_log.add_argument("--print-records", action="store_true")


def _add_record(commands: Subcommands) -> None:
    record = local_command(commands, "record", "cli.loadgen:record",
                           "record client traffic through a transparent tap proxy (Parquet)")
    record.add_argument("--listen", default="127.0.0.1:19092", help="where clients bootstrap (default %(default)s)")
    record.add_argument("--upstream", required=True, help="HOST:PORT of the cluster's bootstrap broker")
    record.add_argument("--out", default="traffic", help="recording directory (default %(default)s)")
    record.add_argument("--advertised-host", help="host named in rewritten Metadata (default: the --listen host)")
    record.add_argument("--broker-port-base", type=int,
                        help="proxy ports for the upstream brokers count up from here (default: ephemeral)")
    record.add_argument("--duration", type=float, help="stop after this many seconds (default: at Ctrl-C/SIGTERM)")
    record.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def _add_loadgen(commands: Subcommands) -> None:
    loadgen = commands.add_parser("loadgen", help="synthesize, replay (on Spark) and report load tests")
    actions = loadgen.add_subparsers(dest="loadgen_command", required=True, metavar="ACTION")
    synth = local_command(actions, "synth", "cli.loadgen:synth",
                          "write a recording from an OpenMessaging Benchmark workload file (no client needed)")
    synth.add_argument("workload", help="OMB workload YAML (its keys unchanged, plus compression, acks, batchSize)")
    synth.add_argument("--out", default="traffic", help="recording directory (default %(default)s)")
    synth.add_argument("--duration", type=float, help="seconds of traffic (default: the workload's testDurationMinutes)")
    synth.add_argument("--topic-prefix", help="topic names are PREFIX-0000, PREFIX-0001... (default: from the name)")
    synth.add_argument("--seed", type=int, default=0, help="random payloads and keys (default %(default)s)")
    synth.add_argument("--max-records", type=int, help="records with producerRate 0 (default: maxRecords or 1000000)")

    from loadgen import options  # argument definitions only (no Spark, no client)

    replay = local_command(actions, "replay", "cli.loadgen:replay",
                           "replay a recording at scale on Spark (runs spark-submit loadgen/replay.py)")
    replay.add_argument("--master", default="local[*]", help="Spark master URL, passed on unchanged (default %(default)s)")
    replay.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="spark-submit --conf (repeatable)")
    options.add_replay_arguments(replay)

    demo = local_command(actions, "demo", "cli.loadgen_demo:run",
                         "start three brokers, record 20 s of kafka-python and kcat traffic, replay it x10 and report")
    demo.add_argument("--dir", help="where the cluster, recording and report go (default ./loadgen-demo/<timestamp>)")
    demo.add_argument("--record-seconds", type=float, default=20.0, help="seconds of recorded traffic (default 20)")
    demo.add_argument("--rate", type=float, default=500.0, help="kafka-python records/s while recording (default 500)")
    demo.add_argument("--scale", type=int, default=10, help="replay copies (default 10)")
    demo.add_argument("--master", default="local[*]", help="Spark master (default %(default)s)")


def _add_certs(commands: Subcommands) -> None:
    certs = local_command(commands, "certs", "cli.certs:run",
                          "make a development CA, broker and client certificates (PEM; PKCS12 on request)")
    certs.add_argument("--dir", default="./certs", help="where to write them (default %(default)s; created 0700)")
    certs.add_argument("--broker", action="append", metavar="NAME",
                       help="a broker certificate for NAME (its CN and a SAN; repeatable; default localhost)")
    certs.add_argument("--san", action="append", metavar="NAME|IP", help="another SAN on every broker certificate")
    certs.add_argument("--client", dest="clients", action="append", metavar="NAME",
                       help="a client certificate, subject CN=NAME,OU=clients,O=kbroker (repeatable)")
    certs.add_argument("--pkcs12", metavar="PASSWORD", help="also write NAME.p12 keystores and truststore.p12")
    certs.add_argument("--key-password", metavar="PASSWORD", help="encrypt the PEM private keys (ssl.key.password)")


def _add_sim(commands: Subcommands) -> None:
    # The simulator parses its own arguments (sim/cli.py): main() hands ``kbroker sim ...`` to
    # it by name, so that no production module imports sim/ (tests/test_architecture.py).
    sim = commands.add_parser("sim", add_help=False,
                              help="run seeds of the deterministic simulator (kbroker sim --help)")
    sim.add_argument("sim_args", nargs=argparse.REMAINDER)


def _add_transactions(commands: Subcommands) -> None:
    txns = commands.add_parser("transactions", help="list, describe transactions; find and abort hanging ones "
                                                    "(kafka-transactions.sh)")
    actions = txns.add_subparsers(dest="transactions_command", required=True, metavar="ACTION")
    listing = client_command(actions, "list", "cli.transactions:list_transactions", "list transactions")
    listing.add_argument("--duration-filter", type=int, metavar="MS",
                         help="only transactions open longer than this (ms); < 0: all")
    describe = client_command(actions, "describe", "cli.transactions:describe",
                              "describe the state of an active transactional-id")
    describe.add_argument("--transactional-id", required=True)
    producers = client_command(actions, "describe-producers", "cli.transactions:describe_producers",
                               "describe the states of active producers for a topic partition")
    producers.add_argument("--broker-id", type=int, help="ask this replica instead of the leader")
    producers.add_argument("--topic", required=True)
    producers.add_argument("--partition", type=int, required=True)
    abort = client_command(actions, "abort", "cli.transactions:abort",
                           "abort a hanging transaction (requires CLUSTER_ACTION or ALTER on the cluster)")
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", type=int, required=True)
    abort.add_argument("--start-offset", type=int, help="start offset of the transaction to abort")
    abort.add_argument("--producer-id", type=int)
    abort.add_argument("--producer-epoch", type=int)
    abort.add_argument("--coordinator-epoch", type=int)
    hanging = client_command(actions, "find-hanging", "cli.transactions:find_hanging", "find hanging transactions")
    hanging.add_argument("--broker-id", type=int, help="broker id to search for hanging transactions")
    hanging.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                         help="maximum transaction timeout in minutes to limit the scope of the search (default 15)")
    hanging.add_argument("--topic", help="topic name to limit search to (required if --partition is specified)")
    hanging.add_argument("--partition", type=int)


# In the order `kbroker --help` lists them.
COMMAND_GROUPS: list[Callable[[Subcommands], None]] = [
    _add_serve, _add_controller, _add_storage, _add_topics, _add_configs, _add_produce, _add_consume, _add_groups,
    _add_transactions, _add_acls,
    _add_users, _add_quotas, _add_metadata, _add_cluster, _add_health, _add_dump_log, _add_record, _add_loadgen, _add_certs,
    _add_sim]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kbroker", description="An asyncio broker for the Kafka wire protocol.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMAND_GROUPS:
        add(commands)
    return parser


# ---------------------------------------------------------------------------------------------
# dispatch

def resolve(target: str) -> Callable:
    """The function a ``"module:function"`` string names, importing its module now."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


async def _run_client(run: Callable, args: argparse.Namespace) -> int:
    async with KafkaClient(args.bootstrap_server, client_id="kbroker-cli", network=client_network(args)) as client:
        return await run(client, args)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["sim"]:
        return resolve("sim.cli:main")(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        run = resolve(args.run)
        if args.client:
            logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="kbroker: %(message)s")
            if args.bare:
                return uvloop.run(run(args))
            return uvloop.run(_run_client(run, args))
        return run(args)
    except UsageError as exc:
        print(f"kbroker: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # Whoever read our stdout went away (``| head``): not an error. Point stdout at
        # /dev/null so the interpreter's final flush does not complain again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (KafkaError, ValueError, OSError) as exc:
        print(f"kbroker: {exc}", file=sys.stderr)
        return 1
