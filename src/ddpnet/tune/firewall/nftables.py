"""nftables: its own ``table inet ddpnet``, loaded atomically from a file and included from
the distribution's nftables.conf so it survives a reboot.

nftables evaluates every table's input chain and an ``accept`` is final only in its own table,
so this table is the gate: it accepts the training ports from the subnet and drops new
connections to them from everywhere else. A host ruleset with ``policy drop`` must still
accept the subnet itself (the plan says so).
"""

from __future__ import annotations

from ddpnet.tune.firewall import PortSpec
from ddpnet.tune.model import Command, FileChange, HostFacts, Part, TuneRequest

RULES = "/etc/ddpnet/firewall.nft"
TABLE = ("inet", "ddpnet")


def main_conf(distro: str) -> str:
    if distro in ("ubuntu", "debian"):
        return "/etc/nftables.conf"
    return "/etc/sysconfig/nftables.conf"


def port_set(spec: PortSpec) -> str:
    items = [str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi, _ in spec.ranges()]
    return "{ " + ", ".join(items) + " }"


def render_rules(spec: PortSpec) -> str:
    ip = "ip" if spec.family == 4 else "ip6"
    ports = port_set(spec)
    what = "; ".join(f"{lo}{'' if lo == hi else f'-{hi}'} {w}" for lo, hi, w in spec.ranges())
    return "\n".join([
        "#!/usr/sbin/nft -f",
        "# Written by `ddpnet tune`: training ports open only from the cluster subnet.",
        f"# {what}",
        "# Family inet: one table for IPv4 and IPv6, so neither family gets around it.",
        "# Declaring then deleting the table makes `nft -f` replace it atomically.",
        "table inet ddpnet",
        "delete table inet ddpnet",
        "",
        "table inet ddpnet {",
        "\tchain input {",
        "\t\t# before the host's own filter chains (priority filter = 0)",
        "\t\ttype filter hook input priority -10; policy accept;",
        "\t\tct state established,related accept",
        '\t\tiifname "lo" accept',
        f"\t\t{ip} saddr {spec.subnet} tcp dport {ports} accept",
        f"\t\ttcp dport {ports} ct state new drop",
        "\t}",
        "}",
        "",
    ])


def include_line() -> str:
    return f'include "{RULES}"  # ddpnet tune'


def render(spec: PortSpec, req: TuneRequest, facts: HostFacts) -> Part:
    files = [FileChange(RULES, render_rules(spec), 0o644, "ddpnet's nftables table")]
    warnings: list[str] = []
    conf = main_conf(req.distro)
    current = facts.files.get(conf)
    if current is None:
        warnings.append(f"{conf} not found: --apply loads the table, but nothing loads it at boot; "
                        f"add `{include_line()}` to your nftables configuration")
    elif RULES not in current:
        sep = "" if current.endswith("\n") or not current else "\n"
        files.append(FileChange(conf, current + sep + include_line() + "\n", 0o644,
                                "load ddpnet's table at boot"))
    return Part(
        name="firewall",
        files=tuple(files),
        apply=(Command(("nft", "-f", RULES), "load table inet ddpnet (atomic replace)"),),
        revert=(Command(("nft", "delete", "table", *TABLE), "remove table inet ddpnet",
                        onlyif=("nft", "list", "table", *TABLE)),),
        notes=(f"nftables: table inet ddpnet opens {port_set(spec)} from {spec.subnet} and "
               "drops new connections to them from elsewhere, over IPv4 and IPv6",
               "if your own nftables ruleset drops input by policy, also accept "
               f"{spec.subnet} there: an accept in one table does not override a drop in "
               "another"),
        warnings=tuple(warnings),
    )
