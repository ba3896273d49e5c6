"""``kbroker cluster elect-leaders``: ElectLeaders (API 43) through any broker, which relays
it to the controller. Preferred election (the first live replica of the assignment takes the
leadership back) by default, ``--unclean`` for an unclean one (a partition with no leader gets
any live replica, losing what it missed). Output as Kafka's kafka-leader-election.sh words it."""

from __future__ import annotations

import argparse

from cli.common import error_name
from protocol.client import KafkaClient
from protocol.errors import ErrorCode

PREFERRED, UNCLEAN = 0, 1


async def run(client: KafkaClient, args: argparse.Namespace) -> int:
    election = UNCLEAN if args.unclean else PREFERRED
    name = "UNCLEAN" if args.unclean else "PREFERRED"
    partitions: list[tuple[str, int]] | None = None
    if args.topic:
        partitions = [(args.topic, p) for p in (args.partition or await client.partitions_for(args.topic))]
    elif args.partition:
        raise ValueError("--partition needs --topic")
    results = await client.elect_leaders(partitions, election)
    elected = sorted(tp for tp, code in results.items() if code == ErrorCode.NONE)
    not_needed = sorted(tp for tp, code in results.items() if code == ErrorCode.ELECTION_NOT_NEEDED)
    failed = sorted((tp, code) for tp, code in results.items() if code not in (ErrorCode.NONE,
                                                                              ErrorCode.ELECTION_NOT_NEEDED))
    if elected:
        print(f"Successfully completed leader election ({name}) for partitions "
              f"{', '.join(f'{t}-{p}' for t, p in elected)}")
    if not_needed:
        print(f"Valid replica already elected for partitions {', '.join(f'{t}-{p}' for t, p in not_needed)}")
    if not results:
        print(f"No partition needed a leader election ({name})")
    for (t, p), code in failed:
        print(f"Error completing leader election ({name}) for partition {t}-{p}: {error_name(code)}")
    return 1 if failed else 0
