"""iptables and ip6tables: in each, its own ``DDPNET`` chain, filled atomically by
``*-restore --noflush`` and jumped to from the top of INPUT. The chain of the cluster
subnet's family accepts the training ports from the subnet; both chains drop new connections
to them from elsewhere (so IPv6 cannot bypass an IPv4 subnet's rules, nor the reverse), and
return everything else to the host's rules."""

from __future__ import annotations

from ddpnet.tune.firewall import PortSpec
from ddpnet.tune.model import Command, FileChange, HostFacts, Part, TuneRequest

RULES = "/etc/ddpnet/firewall.iptables"
RULES6 = "/etc/ddpnet/firewall.ip6tables"
CHAIN = "DDPNET"
#: the kernel has IPv6 (absent with ipv6.disable=1: then ip6tables has nothing to gate)
HAS_IPV6 = ("test", "-e", "/proc/net/if_inet6")


def tool(family: int) -> str:
    return "iptables" if family == 4 else "ip6tables"


def rules_file(family: int) -> str:
    return RULES if family == 4 else RULES6


def dports(spec: PortSpec) -> str:
    return ",".join(str(lo) if lo == hi else f"{lo}:{hi}" for lo, hi, _ in spec.ranges())


def render_rules(spec: PortSpec, family: int | None = None) -> str:
    """The restore file for one family (default: the subnet's); only the subnet's family
    accepts anyone."""
    family = spec.family if family is None else family
    ports = dports(spec)
    accept = ([f"-A {CHAIN} -s {spec.subnet} -p tcp -m multiport --dports {ports} "
               '-m comment --comment "ddpnet: training ports from the cluster subnet" -j ACCEPT']
              if family == spec.family else [])
    nobody = ("nobody else" if accept else
              f"the cluster subnet is IPv{spec.family}: nobody over IPv{family}")
    return "\n".join([
        f"# Written by `ddpnet tune`: load with `{tool(family)}-restore --noflush "
        f"{rules_file(family)}`.",
        "*filter",
        f":{CHAIN} - [0:0]",
        f"-F {CHAIN}",
        f"-A {CHAIN} -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN",
        f"-A {CHAIN} -i lo -j RETURN",
        *accept,
        f"-A {CHAIN} -p tcp -m multiport --dports {ports} -m conntrack --ctstate NEW "
        f'-m comment --comment "ddpnet: {nobody}" -j DROP',
        "COMMIT",
        "",
    ])


def _apply(family: int) -> tuple[Command, ...]:
    ipt, jump = tool(family), ("INPUT", "-j", CHAIN)
    only = HAS_IPV6 if family == 6 else ()
    return (
        Command((f"{ipt}-restore", "--noflush", rules_file(family)),
                f"fill {ipt} chain {CHAIN} atomically", onlyif=only),
        Command((ipt, "-I", "INPUT", "1", "-j", CHAIN), f"jump to {CHAIN} first",
                unless=(ipt, "-C", *jump), onlyif=only),
    )


def _revert(family: int) -> tuple[Command, ...]:
    ipt, jump = tool(family), ("INPUT", "-j", CHAIN)
    return (
        Command((ipt, "-D", *jump), f"stop jumping to {CHAIN}", onlyif=(ipt, "-C", *jump)),
        Command((ipt, "-F", CHAIN), f"empty {CHAIN}", onlyif=(ipt, "-n", "-L", CHAIN)),
        Command((ipt, "-X", CHAIN), f"delete {CHAIN}", onlyif=(ipt, "-n", "-L", CHAIN)),
    )


def render(spec: PortSpec, req: TuneRequest, facts: HostFacts) -> Part:
    other = 6 if spec.family == 4 else 4
    return Part(
        name="firewall",
        files=(FileChange(RULES, render_rules(spec, 4), 0o644, "ddpnet's iptables chain"),
               FileChange(RULES6, render_rules(spec, 6), 0o644, "ddpnet's ip6tables chain")),
        apply=(*_apply(4), *_apply(6)),
        revert=(*_revert(4), *_revert(6)),
        notes=(f"{tool(spec.family)}: chain {CHAIN} opens {dports(spec)} from {spec.subnet} "
               "only",
               f"{tool(other)}: chain {CHAIN} drops new connections to them over "
               f"IPv{other} (the cluster subnet is IPv{spec.family})",
               "the rules are live, not saved: `netfilter-persistent save` (Debian/Ubuntu) or "
               "`service iptables save; service ip6tables save` (RHEL) keeps them at boot"),
    )
