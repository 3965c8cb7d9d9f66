"""ufw: ``allow from SUBNET to any port P proto tcp`` per port or range (ufw's default
incoming policy denies everyone else)."""

from __future__ import annotations

from ddpnet.tune.firewall import PortSpec
from ddpnet.tune.model import Command, HostFacts, Part, TuneRequest


def rules(spec: PortSpec) -> tuple[tuple[str, ...], ...]:
    return tuple(
        ("from", str(spec.subnet), "to", "any", "port",
         str(lo) if lo == hi else f"{lo}:{hi}", "proto", "tcp")
        for lo, hi, _ in spec.ranges()
    )


def render(spec: PortSpec, req: TuneRequest, facts: HostFacts) -> Part:
    return Part(
        name="firewall",
        apply=tuple(Command(("ufw", "allow", *r),
                            "open from the cluster subnet only (ufw skips an existing rule)")
                    for r in rules(spec)),
        revert=tuple(Command(("ufw", "delete", "allow", *r), "close again")
                     for r in rules(spec)),
        touches=("/etc/ufw/user.rules", "/etc/ufw/user6.rules"),
        notes=(f"ufw: the training ports from {spec.subnet} only "
               "(ufw's default incoming policy denies the rest)",),
    )
