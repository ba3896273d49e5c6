"""The seven replication bugs the simulator must find, each behind a switch in production
code (a module-level flag, off unless a test turns it on: reading it costs a global lookup
where the bug would be).

``with reintroduced(name):`` turns one on for the length of a run; ``BUGS`` maps each name
to its module and flag, and to what it does.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Iterator

BUGS: dict[str, tuple[str, str, str]] = {
    "shrink-before-first-fetch": ("broker.partition", "BUG_SHRINK_BEFORE_FIRST_FETCH",
                                  "an ISR shrink before the first fetch after an election"),
    "log-start-before-hw": ("broker.fetcher", "BUG_LOG_START_BEFORE_HW",
                            "the fetcher applying the leader's log start before its high watermark"),
    "hw-over-local-isr": ("broker.partition", "BUG_HW_OVER_LOCAL_ISR",
                          "the high watermark over the committed ISR instead of the maximal ISR (KIP-497)"),
    "ineligible-isr-accepted": ("controller.replication_control", "BUG_INELIGIBLE_ISR_ACCEPTED",
                                "a fenced or shutting-down replica re-admitted to the ISR (KIP-841)"),
    "no-truncation-without-epochs": ("broker.fetcher", "BUG_NO_TRUNCATION_WITHOUT_EPOCHS",
                                     "truncation skipped when the leader epoch cache is empty"),
    "stale-broker-epoch-accepted": ("broker.apis", "BUG_STALE_BROKER_EPOCH_ACCEPTED",
                                    "a LeaderAndIsr sent to an earlier registration of the broker applied "
                                    "(neither held until the broker knows its epoch nor refused)"),
    "ack-before-min-isr": ("broker.partition", "BUG_ACK_BEFORE_MIN_ISR",
                           "an acks=all produce answered before min.insync.replicas replicas have it"),
}


@contextlib.contextmanager
def reintroduced(*names: str) -> Iterator[None]:
    saved = []
    try:
        for name in names:
            module_name, flag, _what = BUGS[name]
            module = importlib.import_module(module_name)
            saved.append((module, flag, getattr(module, flag)))
            setattr(module, flag, True)
        yield
    finally:
        for module, flag, value in reversed(saved):
            setattr(module, flag, value)
