"""The TCP sysctl profile for a training link, in one place: ``doctor`` checks against it and
``tune`` applies it.

The guides' floor is 16 MiB socket buffers; faster links need a larger bandwidth-delay
product (10 Gb/s x 1 ms = 1.25 MB in flight per flow, and NCCL/gloo keep several flows per
peer), so buffer maxima grow with the link speed. Listen backlogs are sized for one TCPStore
serving 1000+ nodes connecting at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

MiB = 1 << 20

#: (minimum link speed in Mb/s, socket buffer maximum in bytes); first match from the top
_BUFFER_TIERS: tuple[tuple[int, int], ...] = (
    (100_000, 256 * MiB),
    (40_000, 128 * MiB),
    (10_000, 64 * MiB),
    (0, 16 * MiB),
)


@dataclass(frozen=True)
class SysctlTarget:
    """One key's target. ``op`` ``min``: the value must be at least ``value``; ``max``: at
    most. For the three-field ``tcp_rmem``/``tcp_wmem`` the target applies to the last field
    (the maximum autotuned buffer) and ``recommended`` is the whole line to write."""

    name: str
    op: Literal["min", "max"]
    value: int
    recommended: str
    why: str

    def satisfied_by(self, current: str) -> bool | None:
        """True/False for a readable value, None when it cannot be parsed."""
        try:
            number = int(current.split()[-1])
        except (IndexError, ValueError):
            return None
        return number >= self.value if self.op == "min" else number <= self.value


@dataclass(frozen=True)
class SysctlProfile:
    link_speed_mbps: int | None
    buffer_max: int
    targets: Mapping[str, SysctlTarget]

    def sysctl_d(self) -> str:
        """The content of ``/etc/sysctl.d/90-ddpnet.conf`` for this profile."""
        lines = [f"# ddpnet TCP profile for a {self.link_speed_mbps or 'unknown'} Mb/s link"]
        lines += [f"{t.name} = {t.recommended}" for t in self.targets.values()]
        return "\n".join(lines) + "\n"


def buffer_max_for(link_speed_mbps: int | None) -> int:
    speed = link_speed_mbps or 0
    for floor, size in _BUFFER_TIERS:
        if speed >= floor:
            return size
    return _BUFFER_TIERS[-1][1]


def profile_for(link_speed_mbps: int | None) -> SysctlProfile:
    """The profile for a link of that speed (None or 0 = unknown: the 16 MiB floor). Pure."""
    buf = buffer_max_for(link_speed_mbps)
    mib = buf // MiB
    targets = (
        SysctlTarget("net.core.rmem_max", "min", buf, str(buf),
                     f"largest receive buffer a socket may ask for ({mib} MiB for this link)"),
        SysctlTarget("net.core.wmem_max", "min", buf, str(buf),
                     f"largest send buffer a socket may ask for ({mib} MiB for this link)"),
        SysctlTarget("net.ipv4.tcp_rmem", "min", buf, f"4096 131072 {buf}",
                     f"TCP receive autotuning ceiling ({mib} MiB)"),
        SysctlTarget("net.ipv4.tcp_wmem", "min", buf, f"4096 65536 {buf}",
                     f"TCP send autotuning ceiling ({mib} MiB)"),
        SysctlTarget("net.core.somaxconn", "min", 4096, "4096",
                     "listen backlog cap: every rank connects to the TCPStore at start"),
        SysctlTarget("net.ipv4.tcp_max_syn_backlog", "min", 8192, "8192",
                     "half-open connections queued while all nodes rendezvous"),
        SysctlTarget("net.ipv4.tcp_fin_timeout", "max", 30, "15",
                     "sockets of a finished job linger less in FIN-WAIT-2"),
    )
    return SysctlProfile(link_speed_mbps, buf, MappingProxyType({t.name: t for t in targets}))
