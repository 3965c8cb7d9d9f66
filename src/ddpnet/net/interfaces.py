"""Network interfaces: name, state, addresses, MTU, link speed and kind.

``list_interfaces`` is the edge (psutil + ``/sys/class/net``); ``classify_kind`` and
``parse_speed`` are pure so fixture sysfs trees test them.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

#: ARPHRD_* values from <linux/if_arp.h> that decide a kind on their own
_ARPHRD_LOOPBACK = 772
_ARPHRD_INFINIBAND = 32

KINDS = ("loopback", "bridge", "docker", "virtual", "infiniband", "physical")


@dataclass(frozen=True)
class Address:
    ip: str
    prefix: int
    family: int  # 4 or 6

    @property
    def is_loopback(self) -> bool:
        return ipaddress.ip_address(self.ip).is_loopback

    @property
    def is_link_local(self) -> bool:
        return ipaddress.ip_address(self.ip).is_link_local

    def network(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        return ipaddress.ip_network(f"{self.ip}/{self.prefix}", strict=False)

    def __str__(self) -> str:
        return f"{self.ip}/{self.prefix}"


@dataclass(frozen=True)
class Interface:
    name: str
    up: bool
    addresses: tuple[Address, ...]
    mtu: int
    speed_mbps: int | None
    kind: str

    def has_family(self, family: int) -> bool:
        return any(a.family == family for a in self.addresses)

    def owns(self, ip: str) -> bool:
        return any(_same_ip(a.ip, ip) for a in self.addresses)

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name, "up": self.up, "kind": self.kind, "mtu": self.mtu,
            "speed_mbps": self.speed_mbps, "addresses": [str(a) for a in self.addresses],
        }


def _same_ip(a: str, b: str) -> bool:
    try:
        return ipaddress.ip_address(a.split("%")[0]) == ipaddress.ip_address(b.split("%")[0])
    except ValueError:
        return False


def classify_kind(name: str, sys_net: Path = Path("/sys/class/net")) -> str:
    """loopback / bridge / docker / virtual / infiniband / physical, from sysfs.

    Docker is checked by name before bridge because docker0 and ``br-<id>`` are bridges
    that NCCL and gloo must never be steered onto; ``virtual`` covers veth, tun, dummy,
    vxlan (their device lives under ``/sys/devices/virtual``).
    """
    base = sys_net / name
    arphrd = _read_int(base / "type")
    if arphrd == _ARPHRD_LOOPBACK or name == "lo":
        return "loopback"
    if name.startswith("docker") or (name.startswith("br-") and len(name) == 15):
        return "docker"
    if (base / "bridge").exists():
        return "bridge"
    if arphrd == _ARPHRD_INFINIBAND:
        return "infiniband"
    try:
        target = os.readlink(base)
    except OSError:
        target = ""
    if "/virtual/" in target or not (base / "device").exists():
        return "virtual"
    return "physical"


def parse_speed(text: str | None) -> int | None:
    """``/sys/class/net/X/speed`` in Mbit/s; virtual links report -1 or fail to read."""
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        return None
    return value if value > 0 else None


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:  # EINVAL on a down or virtual link, ENOENT on fixtures
        return None


def _read_int(path: Path) -> int | None:
    text = _read_text(path)
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


def _prefix(netmask: str | None, family: int) -> int:
    if not netmask:
        return 32 if family == 4 else 128
    try:
        if family == 4:
            return ipaddress.IPv4Network(f"0.0.0.0/{netmask}").prefixlen
        return bin(int(ipaddress.IPv6Address(netmask))).count("1")
    except ValueError:
        return 32 if family == 4 else 128


def list_interfaces(sys_net: Path = Path("/sys/class/net")) -> tuple[Interface, ...]:
    """Every interface of this host (network namespace), sorted by name (edge)."""
    import psutil

    addrs = psutil.net_if_addrs()
    stats = psutil.net_if_stats()
    names = sorted(set(addrs) | set(stats))
    result = []
    for name in names:
        addresses = []
        for a in addrs.get(name, []):
            if a.family == socket.AF_INET:
                addresses.append(Address(a.address, _prefix(a.netmask, 4), 4))
            elif a.family == socket.AF_INET6:
                addresses.append(Address(a.address.split("%")[0], _prefix(a.netmask, 6), 6))
        st = stats.get(name)
        result.append(Interface(
            name=name,
            up=bool(st.isup) if st else False,
            addresses=tuple(addresses),
            mtu=st.mtu if st else 0,
            speed_mbps=parse_speed(_read_text(sys_net / name / "speed")),
            kind=classify_kind(name, sys_net),
        ))
    return tuple(result)


def owner_of(ip: str, interfaces: Sequence[Interface]) -> Interface | None:
    """The interface holding address ``ip`` (pure; IPv6 scope ids ignored)."""
    return next((iface for iface in interfaces if iface.owns(ip)), None)


def kernel_order(sys_net: Path = Path("/sys/class/net")) -> tuple[str, ...]:
    """Interface names by ifindex, the order ``getifaddrs()`` lists them in (edge): NCCL takes
    the first match in that order, not by name."""
    try:
        entries = list(sys_net.iterdir())
    except OSError:
        return ()
    indexed = sorted((_read_int(e / "ifindex") or 1 << 30, e.name) for e in entries)
    return tuple(name for _, name in indexed)
