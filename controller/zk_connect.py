"""``zookeeper.connect`` (Kafka's key): ``host:port[,host:port...][/chroot]``."""

from __future__ import annotations

from broker.config import ConfigError


def parse_zookeeper_connect(value: str | None) -> tuple[str, str]:
    """(hosts, chroot): kazoo's ``hosts`` string without the chroot, and the chroot path
    ('' when none). Raises ConfigError naming the key for anything else."""
    if not value or not value.strip():
        raise ConfigError("zookeeper.connect: controller.metadata.store=zookeeper needs host:port[,host:port...][/chroot]")
    value = value.strip()
    hosts, slash, chroot = value.partition("/")
    chroot = (slash + chroot).rstrip("/") if slash else ""
    if chroot and any(not part for part in chroot.split("/")[1:]):
        raise ConfigError(f"zookeeper.connect: bad chroot {chroot!r}")
    out = []
    for spec in hosts.split(","):
        host, sep, port = spec.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise ConfigError(f"zookeeper.connect: {spec.strip()!r} is not host:port")
        out.append(f"{host}:{int(port)}")
    return ",".join(out), chroot
