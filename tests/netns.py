"""Test hosts in Linux network namespaces: each host has its own address on a private bridge,
so a test can cut one host off from some peers (a real network partition) while others —
the test's clients in the root namespace — still reach it.

Topology: a bridge ``kb<tag>`` in the root namespace holding 10.<a>.<b>.1/24; host ``i`` is a
namespace ``kb<tag>h<i>`` whose ``eth0`` (one end of a veth pair, the other end on the
bridge) holds 10.<a>.<b>.<10+i>/24. Cutting host A from host B installs blackhole routes for
each other's address inside both namespaces: packets between them are dropped both ways,
while traffic to and from the bridge address (the test process) still flows.

Needs root (CAP_NET_ADMIN) and iproute2. Everything created is removed by ``close()``.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field


def _ip(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cmd = ["ip", *args] if netns is None else ["ip", "netns", "exec", netns, "ip", *args]
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


@dataclass
class NetnsHost:
    index: int
    netns: str
    address: str
    cut_from: set[str] = field(default_factory=set)

    def exec_prefix(self) -> list[str]:
        """Prefix a command with this to run it inside the host's namespace."""
        return ["ip", "netns", "exec", self.netns]


class NetnsNetwork:
    """A bridge and ``n`` namespaced hosts on it. Use as a context manager."""

    def __init__(self, n: int, tag: str | None = None) -> None:
        self.tag = tag or f"{os.getpid() % 10000:04d}"
        pid = os.getpid()
        self.subnet = f"10.{100 + pid % 100}.{pid // 100 % 250}"
        self.bridge = f"kb{self.tag}"
        self.hosts: list[NetnsHost] = []
        self._n = n

    @property
    def gateway(self) -> str:
        """The root namespace's address on the bridge (where the test's clients connect from)."""
        return f"{self.subnet}.1"

    def __enter__(self) -> "NetnsNetwork":
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _iptables_forward(self, action: str) -> None:
        # Docker sets the FORWARD policy to DROP and has bridged frames pass through iptables
        # (br_netfilter): let frames between ports of our own bridge through.
        rule = ["FORWARD", "-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT"]
        subprocess.run(["iptables", action, *rule], capture_output=True, check=False)

    def _create(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        self._iptables_forward("-I")
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i in range(self._n):
            netns = f"kb{self.tag}h{i}"
            outside, inside = f"kb{self.tag}v{i}", f"kb{self.tag}p{i}"
            _ip("netns", "add", netns)
            host = NetnsHost(i, netns, f"{self.subnet}.{10 + i}")
            self.hosts.append(host)
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            _ip("link", "set", outside, "master", self.bridge)
            _ip("link", "set", outside, "up")
            _ip("link", "set", inside, "netns", netns)
            _ip("link", "set", "lo", "up", netns=netns)
            _ip("link", "set", inside, "name", "eth0", netns=netns)
            _ip("addr", "add", f"{host.address}/24", "dev", "eth0", netns=netns)
            _ip("link", "set", "eth0", "up", netns=netns)

    def cut(self, a: NetnsHost, b: NetnsHost) -> None:
        """Drop every packet between ``a`` and ``b`` (both directions)."""
        for src, dst in ((a, b), (b, a)):
            if dst.address not in src.cut_from:
                _ip("route", "add", "blackhole", f"{dst.address}/32", netns=src.netns)
                src.cut_from.add(dst.address)

    def heal(self, a: NetnsHost, b: NetnsHost) -> None:
        for src, dst in ((a, b), (b, a)):
            if dst.address in src.cut_from:
                _ip("route", "del", "blackhole", f"{dst.address}/32", netns=src.netns, check=False)
                src.cut_from.discard(dst.address)

    def isolate(self, host: NetnsHost, from_hosts: list[NetnsHost]) -> None:
        for other in from_hosts:
            if other is not host:
                self.cut(host, other)

    def heal_all(self) -> None:
        for a in self.hosts:
            for b in self.hosts:
                if a is not b:
                    self.heal(a, b)

    def close(self) -> None:
        for i, host in enumerate(self.hosts):
            subprocess.run(["ip", "netns", "pids", host.netns], capture_output=True)
            _ip("link", "del", f"kb{self.tag}v{i}", check=False)
            _ip("netns", "del", host.netns, check=False)
        self.hosts.clear()
        _ip("link", "del", self.bridge, check=False)
        self._iptables_forward("-D")


def netns_available() -> str | None:
    """None when namespaces can be made here, else why not (for a failing test's message)."""
    probe = f"kbprobe{os.getpid() % 100000}"
    result = _ip("netns", "add", probe, check=False)
    if result.returncode != 0:
        return f"`ip netns add` failed: {result.stderr.strip()} (the netns tests need root / CAP_NET_ADMIN)"
    _ip("netns", "del", probe, check=False)
    return None
