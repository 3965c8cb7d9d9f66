"""The TCP sysctl profile for a training link, in one table: ``doctor`` checks against it and
``tune`` writes it, so what tune writes is by construction what doctor wants.

Speed tiers (:data:`TIERS`) size the socket buffers; every other value is the same on every
tier. Each value carries the reason it was chosen; ``tune`` writes that reason as the comment
above the line in ``/etc/sysctl.d/90-ddpnet.conf`` and ``doctor`` prints it with a warning.

Sources: the guides' values (16 MiB buffers, ``tcp_fin_timeout 30``, ``tcp_max_syn_backlog``
4096) are the floor; above it, ESnet's fasterdata Linux host tuning
(https://fasterdata.es.net/host-tuning/linux/) for 10/40/100 Gb/s hosts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

MiB = 1 << 20
GiB = 1 << 30
#: the largest value ``net.core.rmem_max``/``wmem_max`` take (an int in the kernel)
INT_MAX = (1 << 31) - 1

#: tcp_rmem/tcp_wmem minimum and default fields, the same on every tier. 131072 is the
#: kernel's own tcp_rmem default since Linux 4.20 (87380 is the older one: writing it would
#: shrink the first window); 65536 is ESnet's tcp_wmem default (kernel: 16384).
#: Autotuning grows both towards the maximum as a flow needs it, so a large default (ESnet's
#: 64 MiB at 100G) only reserves room on idle sockets, and gloo keeps one per peer.
RMEM_MIN_DEFAULT = "4096 131072"
WMEM_MIN_DEFAULT = "4096 65536"


@dataclass(frozen=True)
class Tier:
    """A speed tier: the buffer sizes for links of at least ``min_mbps``."""

    name: str
    min_mbps: int
    #: net.core.rmem_max/wmem_max: the most a socket may ask for with SO_RCVBUF/SO_SNDBUF
    core_max: int
    #: third field of tcp_rmem/tcp_wmem: how far autotuning grows a socket's buffers; gloo
    #: and NCCL never set SO_RCVBUF/SO_SNDBUF, so this is what their flows actually get
    autotune_max: int
    #: why these sizes
    source: str
    #: 10 Gb/s and faster: also raise the NIC backlog and probe the path MTU (ESnet)
    fast: bool


#: first match from the top. ESnet sizes its maxima for paths up to 100-200 ms and caps
#: autotuning at half of them (10G: 32 of 64 MiB, 40G: 64 of 128 MiB); ddpnet lets autotuning
#: use the whole maximum below 100G because gloo and NCCL never set SO_RCVBUF/SO_SNDBUF, so
#: autotuning is all their flows get. The maxima are caps, not allocations: a socket grows
#: only as far as its bandwidth-delay product needs (100 Gb/s x 1 ms = 12.5 MB).
TIERS: tuple[Tier, ...] = (
    Tier("100g", 100_000, INT_MAX, GiB,
         "ESnet's 100G host tuning; the largest value the kernel takes", True),
    Tier("40g", 40_000, 128 * MiB, 128 * MiB, "ESnet's 40G host tuning", True),
    Tier("10g", 10_000, 64 * MiB, 64 * MiB, "ESnet's 10G host tuning", True),
    Tier("guide", 0, 16 * MiB, 16 * MiB, "the guides' value", False),
)
TIER_NAMES = tuple(t.name for t in TIERS)


@dataclass(frozen=True)
class SysctlTarget:
    """One key's target. ``op`` ``min``: the value must be at least ``value``; ``max``: at
    most. For the three-field ``tcp_rmem``/``tcp_wmem`` the target applies to the last field
    (the maximum autotuned buffer) and ``recommended`` is the whole line to write.

    ``checked``: ``doctor`` has a check for the key (tune writes every target). ``scope``:
    ``netns`` keys exist in every network namespace (containers, lab nodes), ``host`` keys
    only in the initial one on most kernels (6.18 namespaces rmem_max/wmem_max too)."""

    name: str
    op: Literal["min", "max"]
    value: int
    recommended: str
    why: str
    scope: Literal["netns", "host"] = "netns"
    checked: bool = True

    def satisfied_by(self, current: str) -> bool | None:
        """True/False for a readable value, None when it cannot be parsed."""
        number = last_field(current)
        if number is None:
            return None
        return number >= self.value if self.op == "min" else number <= self.value


def last_field(value: object) -> int | None:
    """A sysctl value's last field as a number (``4096 131072 6291456`` -> 6291456: the
    maximum of tcp_rmem/tcp_wmem; a one-field value is itself), None when unparsable."""
    try:
        return int(str(value).split()[-1])
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True)
class SysctlProfile:
    link_speed_mbps: int | None
    tier: str
    #: why this tier (the link speed, or --profile)
    reason: str
    buffer_max: int
    targets: Mapping[str, SysctlTarget]

    @property
    def checked(self) -> Mapping[str, SysctlTarget]:
        """The targets ``doctor`` checks."""
        return MappingProxyType({k: t for k, t in self.targets.items() if t.checked})

    def sysctl_d(self) -> str:
        """The bare key = value lines of this profile (``tune`` renders the commented file)."""
        lines = [f"# ddpnet TCP profile {self.tier} ({self.reason})"]
        lines += [f"{t.name} = {t.recommended}" for t in self.targets.values()]
        return "\n".join(lines) + "\n"


def tier_for(link_speed_mbps: int | None) -> tuple[Tier, str]:
    """The largest tier the link reaches, and why (None or 0 = unknown: the guides')."""
    speed = link_speed_mbps or 0
    if speed <= 0:
        return TIERS[-1], "link speed unknown: the guides' values"
    for tier in TIERS[:-1]:
        if speed >= tier.min_mbps:
            return tier, f"link speed {speed} Mb/s >= {tier.min_mbps // 1000} Gb/s"
    floor = TIERS[-2].min_mbps // 1000
    return TIERS[-1], f"link speed {speed} Mb/s < {floor} Gb/s: the guides' values"


def tier_named(name: str) -> Tier:
    for tier in TIERS:
        if tier.name == name:
            return tier
    raise KeyError(f"no sysctl profile {name!r} (one of {', '.join(TIER_NAMES)})")


def _targets(tier: Tier) -> tuple[SysctlTarget, ...]:
    """The table: every value with its reason. Pure."""
    core, auto = tier.core_max, tier.autotune_max
    on = f"{tier.name} profile: {tier.source}"
    targets = [
        SysctlTarget("net.core.rmem_max", "min", core, str(core),
                     f"largest receive buffer a socket may ask for ({on})", "host"),
        SysctlTarget("net.core.wmem_max", "min", core, str(core),
                     f"largest send buffer a socket may ask for ({on})", "host"),
        SysctlTarget("net.ipv4.tcp_rmem", "min", auto, f"{RMEM_MIN_DEFAULT} {auto}",
                     "TCP receive autotuning min/default/max: lets gradient streams fill "
                     "the link (default: the kernel's own 128 KiB)"),
        SysctlTarget("net.ipv4.tcp_wmem", "min", auto, f"{WMEM_MIN_DEFAULT} {auto}",
                     "TCP send autotuning min/default/max (default: ESnet's 64 KiB)"),
        SysctlTarget("net.ipv4.tcp_fin_timeout", "max", 30, "30",
                     "free sockets of finished ranks sooner (guides' value; default 60)"),
        SysctlTarget("net.ipv4.tcp_max_syn_backlog", "min", 8192, "8192",
                     "every rank connects to the master at once at rendezvous (guides: 4096)"),
        SysctlTarget("net.core.somaxconn", "min", 4096, "4096",
                     "TCPStore's listen backlog: world-size connections arrive together "
                     "(raise it above the number of ranks for 4096+ ranks)"),
    ]
    if tier.fast:
        targets += [
            SysctlTarget("net.ipv4.tcp_mtu_probing", "min", 1, "1",
                         "recover from black-hole paths when jumbo frames are in use (ESnet)",
                         checked=False),
            SysctlTarget("net.core.netdev_max_backlog", "min", 250000, "250000",
                         "queue more packets per CPU before dropping at 10+ Gb/s (ESnet)",
                         "host", checked=False),
        ]
    return tuple(targets)


def profile_of(tier: Tier, link_speed_mbps: int | None = None,
               reason: str = "") -> SysctlProfile:
    targets = _targets(tier)
    return SysctlProfile(link_speed_mbps, tier.name, reason or tier.source, tier.core_max,
                         MappingProxyType({t.name: t for t in targets}))


def profile_for(link_speed_mbps: int | None) -> SysctlProfile:
    """The profile for a link of that speed (None or 0 = unknown: the 16 MiB floor). Pure."""
    tier, reason = tier_for(link_speed_mbps)
    return profile_of(tier, link_speed_mbps, reason)


def checked_keys() -> tuple[str, ...]:
    """The keys ``doctor`` checks (the same on every tier; a test holds that)."""
    return tuple(profile_of(TIERS[-1]).checked)
