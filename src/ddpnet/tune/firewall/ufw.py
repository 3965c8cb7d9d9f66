"""ufw: ``allow from SUBNET to any port P proto tcp`` per port or range (ufw's default
incoming policy denies everyone else). ufw filters IPv6 only with ``IPV6=yes`` in
/etc/default/ufw (Ubuntu's default): with ``IPV6=no`` the plan warns, as IPv6 connections
then bypass ufw, and ufw cannot add an IPv6 subnet's rules at all."""

from __future__ import annotations

import re

from ddpnet.tune.firewall import PortSpec
from ddpnet.tune.model import Command, HostFacts, Part, TuneRequest

DEFAULTS = "/etc/default/ufw"


def rules(spec: PortSpec) -> tuple[tuple[str, ...], ...]:
    return tuple(
        ("from", str(spec.subnet), "to", "any", "port",
         str(lo) if lo == hi else f"{lo}:{hi}", "proto", "tcp")
        for lo, hi, _ in spec.ranges()
    )


def ipv6_enabled(defaults: str | None) -> bool | None:
    """``IPV6=`` of /etc/default/ufw (the last one wins); None when the file is absent."""
    if defaults is None:
        return None
    found = re.findall(r"^\s*IPV6\s*=\s*['\"]?(\w+)", defaults, re.M)
    return bool(found) and found[-1].lower() == "yes"


def ipv6_warnings(spec: PortSpec, facts: HostFacts) -> tuple[str, ...]:
    if ipv6_enabled(facts.files.get(DEFAULTS)) is not False:
        return ()
    if spec.family == 6:
        return (f"{DEFAULTS} has IPV6=no: ufw cannot add rules for {spec.subnet}; set "
                "IPV6=yes there and run `ufw reload` first",)
    return (f"{DEFAULTS} has IPV6=no: ufw does not filter IPv6, so IPv6 connections to the "
            "training ports bypass these rules; set IPV6=yes there and run `ufw reload`",)


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
               "(ufw's default incoming policy denies the rest, over IPv4 and IPv6)",),
        warnings=ipv6_warnings(spec, facts),
    )
