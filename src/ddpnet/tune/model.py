"""Frozen inputs and outputs of the tune renderers."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ddpnet.sysctl_profile import TIER_NAMES

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPInterface = ipaddress.IPv4Interface | ipaddress.IPv6Interface

DISTROS = ("rhel7", "rhel8", "rhel9", "ubuntu", "debian")
FIREWALLS = ("firewalld", "nftables", "iptables", "ufw", "none")
#: the sysctl profiles, slowest first: the speed tiers of ``ddpnet.sysctl_profile``
PROFILES = tuple(reversed(TIER_NAMES))

#: torchrun's default c10d rendezvous port, reserved and opened next to MASTER_PORT
RDZV_PORT = 29400


@dataclass(frozen=True)
class TuneRequest:
    """What the user asked for, validated (see :mod:`ddpnet.tune.validate`)."""

    distro: str
    firewall: str
    profile: str
    master_port: int = 29500
    cluster_subnet: IPNetwork | None = None
    port_range: tuple[int, int] | None = None  # narrow ip_local_port_range to this
    static_ip: IPInterface | None = None
    gateway: str | None = None
    dns: tuple[str, ...] = ()
    zone: str = "public"  # firewalld zone the rich rules go to
    sources: Mapping[str, str] = field(default_factory=dict)  # distro/firewall/profile -> why


@dataclass(frozen=True)
class HostFacts:
    """What the renderers need to know about the node; read by :mod:`ddpnet.tune.facts`."""

    hostname: str
    iface: str
    iface_reason: str
    address: str | None = None  # the routable address on ``iface`` (no prefix)
    mtu: int | None = None
    speed_mbps: int | None = None
    port_range: tuple[int, int] = (32768, 60999)  # the kernel's ip_local_port_range now
    reserved_ports: str = ""  # ip_local_reserved_ports now
    sysctl_now: Mapping[str, str] = field(default_factory=dict)  # key -> live value
    selinux_enforce: str | None = None  # contents of /sys/fs/selinux/enforce, None if absent
    selinux_config: str | None = None  # /etc/selinux/config
    audit_log: str | None = None  # the tail of /var/log/audit/audit.log (AVC denials)
    files: Mapping[str, str] = field(default_factory=dict)  # path -> current text we edit
    #: fact -> where it was read ("live host", "root /img: etc/hostname", "kernel default")
    sources: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FileChange:
    """The full desired content of one file (absolute path, as on the target root)."""

    path: str
    content: str
    mode: int = 0o644
    why: str = ""


@dataclass(frozen=True)
class Command:
    """A command run after the files are written; ``unless``/``onlyif`` are checks that make it
    idempotent (skip when ``unless`` exits 0, run only when ``onlyif`` exits 0)."""

    argv: tuple[str, ...]
    why: str = ""
    unless: tuple[str, ...] = ()
    onlyif: tuple[str, ...] = ()

    def to_list(self) -> list[str]:
        return list(self.argv)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"argv": list(self.argv), "why": self.why}
        if self.unless:
            out["unless"] = list(self.unless)
        if self.onlyif:
            out["onlyif"] = list(self.onlyif)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Command:
        return cls(tuple(d["argv"]), d.get("why", ""), tuple(d.get("unless", ())),
                   tuple(d.get("onlyif", ())))


@dataclass(frozen=True)
class Part:
    """One renderer's output: files to write, commands to run after them and to undo them."""

    name: str
    files: tuple[FileChange, ...] = ()
    apply: tuple[Command, ...] = ()
    revert: tuple[Command, ...] = ()
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    #: files the commands change (a firewalld zone, ufw's user.rules): backed up before the
    #: commands run and restored byte for byte after the revert commands
    touches: tuple[str, ...] = ()
    #: revert restores values captured before the first apply (sysctl) rather than undoing
    #: the latest rules (firewall), so a re-apply keeps the first revert
    keep_first_revert: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "files": [{"path": f.path, "mode": oct(f.mode), "why": f.why} for f in self.files],
            "apply": [c.to_dict() for c in self.apply],
            "revert": [c.to_dict() for c in self.revert],
            "touches": list(self.touches),
            "notes": list(self.notes),
            "warnings": list(self.warnings),
        }


@dataclass(frozen=True)
class Plan:
    request: TuneRequest
    facts: HostFacts
    parts: tuple[Part, ...]

    def part(self, name: str) -> Part | None:
        return next((p for p in self.parts if p.name == name), None)
