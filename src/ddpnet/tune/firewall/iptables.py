"""iptables: its own ``DDPNET`` chain, filled atomically by ``iptables-restore --noflush`` and
jumped to from the top of INPUT. The chain accepts the training ports from the subnet, drops
new connections to them from elsewhere, and returns everything else to the host's rules."""

from __future__ import annotations

from ddpnet.tune.firewall import PortSpec
from ddpnet.tune.model import Command, FileChange, HostFacts, Part, TuneRequest

RULES = "/etc/ddpnet/firewall.iptables"
CHAIN = "DDPNET"


def tool(spec: PortSpec) -> str:
    return "iptables" if spec.family == 4 else "ip6tables"


def dports(spec: PortSpec) -> str:
    return ",".join(str(lo) if lo == hi else f"{lo}:{hi}" for lo, hi, _ in spec.ranges())


def render_rules(spec: PortSpec) -> str:
    ports = dports(spec)
    return "\n".join([
        f"# Written by `ddpnet tune`: load with `{tool(spec)}-restore --noflush {RULES}`.",
        "*filter",
        f":{CHAIN} - [0:0]",
        f"-F {CHAIN}",
        f"-A {CHAIN} -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN",
        f"-A {CHAIN} -i lo -j RETURN",
        f"-A {CHAIN} -s {spec.subnet} -p tcp -m multiport --dports {ports} "
        '-m comment --comment "ddpnet: training ports from the cluster subnet" -j ACCEPT',
        f"-A {CHAIN} -p tcp -m multiport --dports {ports} -m conntrack --ctstate NEW "
        '-m comment --comment "ddpnet: nobody else" -j DROP',
        "COMMIT",
        "",
    ])


def render(spec: PortSpec, req: TuneRequest, facts: HostFacts) -> Part:
    ipt = tool(spec)
    jump = ("INPUT", "-j", CHAIN)
    return Part(
        name="firewall",
        files=(FileChange(RULES, render_rules(spec), 0o644, f"ddpnet's {ipt} chain"),),
        apply=(
            Command((f"{ipt}-restore", "--noflush", RULES), f"fill chain {CHAIN} atomically"),
            Command((ipt, "-I", *jump[:1], "1", *jump[1:]), f"jump to {CHAIN} first",
                    unless=(ipt, "-C", *jump)),
        ),
        revert=(
            Command((ipt, "-D", *jump), f"stop jumping to {CHAIN}", onlyif=(ipt, "-C", *jump)),
            Command((ipt, "-F", CHAIN), f"empty {CHAIN}", onlyif=(ipt, "-n", "-L", CHAIN)),
            Command((ipt, "-X", CHAIN), f"delete {CHAIN}", onlyif=(ipt, "-n", "-L", CHAIN)),
        ),
        notes=(f"{ipt}: chain {CHAIN} opens {dports(spec)} from {spec.subnet} only",
               "the rules are live, not saved: `netfilter-persistent save` (Debian/Ubuntu) or "
               "`service iptables save` (RHEL) keeps them at boot"),
    )
