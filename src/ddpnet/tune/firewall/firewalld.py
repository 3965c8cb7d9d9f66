"""firewalld: permanent rich rules in the active zone with the subnet as source, then a
reload. Rich rules rather than a source-bound zone: a zone bound to the subnet would take
the subnet's ssh and everything else away from the interface's zone."""

from __future__ import annotations

from ddpnet.tune.firewall import PortSpec
from ddpnet.tune.model import Command, HostFacts, Part, TuneRequest


def rich_rules(spec: PortSpec) -> tuple[str, ...]:
    family = "ipv4" if spec.family == 4 else "ipv6"
    return tuple(
        f'rule family="{family}" source address="{spec.subnet}" '
        f'port port="{lo if lo == hi else f"{lo}-{hi}"}" protocol="tcp" accept'
        for lo, hi, _ in spec.ranges()
    )


def render(spec: PortSpec, req: TuneRequest, facts: HostFacts) -> Part:
    zone = f"--zone={req.zone}"
    add = tuple(
        Command(("firewall-cmd", "--permanent", zone, f"--add-rich-rule={r}"),
                "open from the cluster subnet only",
                unless=("firewall-cmd", "--permanent", zone, f"--query-rich-rule={r}"))
        for r in rich_rules(spec)
    )
    remove = tuple(
        Command(("firewall-cmd", "--permanent", zone, f"--remove-rich-rule={r}"),
                "close again",
                onlyif=("firewall-cmd", "--permanent", zone, f"--query-rich-rule={r}"))
        for r in rich_rules(spec)
    )
    reload = Command(("firewall-cmd", "--reload"), "make the permanent rules live")
    return Part(
        name="firewall",
        apply=(*add, reload),
        revert=(*remove, reload),
        touches=(f"/etc/firewalld/zones/{req.zone}.xml",),
        notes=(f"firewalld: zone {req.zone} accepts the training ports from {spec.subnet} "
               f"only (rich rules of family ipv{spec.family}); everything else, over IPv4 or "
               "IPv6, keeps the zone's policy",),
    )
