"""Several NICs on a node: which one each node uses and why, and the traps of having more.

- Two interfaces in one subnet: both answer ARP for either address (ARP flux, with the
  default ``arp_ignore=0``/``arp_announce=0``) and replies may leave by the other one, which a
  strict ``rp_filter=1`` then drops: connections that work or hang depending on which NIC a
  peer's packets reach.
- NCCL's own choice: without NCCL_SOCKET_IFNAME NCCL takes ``ib*`` first, else the first
  interface in kernel order that is not docker/lo/virbr: a management NIC or an IPoIB
  interface in another network, while the route to MASTER_ADDR goes elsewhere.

:func:`nic_facts` is what a node publishes (pure, given a sysctl reader); :func:`compare_nics`
is rank 0's judgement (pure).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ddpnet.check.causes import Cause
from ddpnet.check.compare import NodeFacts
from ddpnet.check.ifvars import cluster_subnet, interface_in, picks_of
from ddpnet.net.interfaces import Interface
from ddpnet.net.picks import NCCL, is_loopback_pick

SYSCTLS = ("rp_filter", "arp_ignore", "arp_announce")
Sysctl = Callable[[str], "str | None"]


def twin_subnets(interfaces: Sequence[Interface]) -> dict[str, list[str]]:
    """Subnets on more than one up, non-loopback interface: subnet -> interfaces (pure)."""
    seen: dict[str, list[str]] = defaultdict(list)
    for iface in interfaces:
        if iface.kind == "loopback" or not iface.up:
            continue
        for a in iface.addresses:
            net = str(a.network())
            if not a.is_link_local and iface.name not in seen[net]:
                seen[net].append(iface.name)
    return {net: names for net, names in seen.items() if len(names) > 1}


def effective(sysctl: Sysctl, key: str, iface: str) -> int | None:
    """The kernel uses the larger of ``all`` and the interface's value for these three."""
    values = []
    for scope in ("all", iface):
        text = sysctl(f"net.ipv4.conf.{scope}.{key}")
        if text is not None and text.strip().lstrip("-").isdigit():
            values.append(int(text))
    return max(values) if values else None


def nic_facts(interfaces: Sequence[Interface], source: str, reason: str,
              sysctl: Sysctl) -> dict[str, Any]:
    """This node's NIC facts: why its interface was chosen, subnets on several interfaces
    and, for those interfaces, rp_filter/arp_ignore/arp_announce as the kernel applies them."""
    twins = twin_subnets(interfaces)
    names = sorted({n for group in twins.values() for n in group})
    return {"interface_why": {"source": source, "reason": reason},
            "twin_subnets": twins,
            # what check.networks compares: is another network between the hosts faster?
            "links": {i.name: {"speed_mbps": i.speed_mbps, "kind": i.kind, "up": i.up}
                      for i in interfaces if i.kind != "loopback"},
            "nic_sysctl": {n: {k: effective(sysctl, k, n) for k in SYSCTLS} for n in names}}


def compare_nics(nodes: Sequence[NodeFacts]) -> list[Cause]:
    """``nic-same-subnet`` and ``nccl-auto-interface`` (warnings: they make a job fragile or
    put it on another network, they do not stop this check's own traffic)."""
    found = [_same_subnet(nodes)]
    if len({n.host for n in nodes}) > 1:
        found.append(_nccl_auto(nodes))
    return [c for c in found if c is not None]


def _sysctl_text(n: NodeFacts, names: Sequence[str]) -> str:
    values = (n.facts.get("nic_sysctl") or {})
    parts = []
    for name in names:
        v = values.get(name) or {}
        risky = []
        if v.get("rp_filter") == 1:
            risky.append("rp_filter=1 (strict: drops replies that arrive on the other NIC)")
        if v.get("arp_ignore") == 0:
            risky.append("arp_ignore=0 (answers ARP for both addresses: ARP flux)")
        if risky:
            parts.append(f"{name}: {', '.join(risky)}")
    return "; ".join(parts)


def _same_subnet(nodes: Sequence[NodeFacts]) -> Cause | None:
    odd = [(n, net, names) for n in nodes
           for net, names in sorted((n.facts.get("twin_subnets") or {}).items())]
    if not odd:
        return None
    shown = {n.rank: (n, net, names) for n, net, names in odd}  # one line per rank
    detail = "; ".join(
        f"rank {n.rank} on {n.label}: {net} on {', '.join(names)} (uses "
        f"{n.facts.get('interface')}" + (f"; {s}" if (s := _sysctl_text(n, names)) else "")
        + ")" for n, net, names in shown.values())
    fix = "; ".join(
        f"on {n.label}: keep one interface in {net} (ip addr del <its address> dev "
        f"{next((x for x in names if x != n.facts.get('interface')), names[-1])}), or "
        f"sysctl -w net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2 "
        f"net.ipv4.conf.all.rp_filter=2 and pin the interface: export "
        f"GLOO_SOCKET_IFNAME={n.facts.get('interface')} "
        f"NCCL_SOCKET_IFNAME=={n.facts.get('interface')}"
        for n, net, names in shown.values())
    return Cause(
        id="nic-same-subnet", stage="facts", severity="warn",
        hosts=tuple(n.label for n, _, _ in shown.values()), ranks=tuple(shown),
        detail="one subnet on several interfaces: " + detail + "; replies may leave by the "
               "other NIC and peers may learn either MAC, so connections work or hang "
               "depending on the path",
        fix=fix,
        evidence=tuple(f"rank {n.rank} on {n.label}: {net} on {', '.join(names)}"
                       for n, net, names in shown.values()),
        ruled_out=("a broken pair: the mesh judges each pair's connections itself "
                   "(reverse-path-drop or asymmetric-route where the kernel drops them)",),
        confidence="medium",
        see_for_yourself="ip -br addr; sysctl net.ipv4.conf.all.rp_filter "
                         "net.ipv4.conf.all.arp_ignore")


def _nccl_auto(nodes: Sequence[NodeFacts]) -> Cause | None:
    ref = cluster_subnet(nodes)
    odd = []
    for n in nodes:
        pick = next((p for p in picks_of(n) if p.var == NCCL and p.value is None), None)
        if pick is None or pick.iface is None or pick.iface == n.facts.get("interface"):
            continue
        if n.facts.get("interface_pinned"):  # the user chose the job's interface: no reference
            continue
        if is_loopback_pick(pick) or pick.subnet != ref:
            odd.append((n, pick))
    if not odd:
        return None
    return Cause(
        id="nccl-auto-interface", stage="facts", severity="warn",
        hosts=tuple(n.label for n, _ in odd), ranks=tuple(n.rank for n, _ in odd),
        detail="without NCCL_SOCKET_IFNAME, NCCL picks another interface than the job's: "
               + "; ".join(f"rank {n.rank} on {n.label}: {p.iface} {p.address} "
                           f"({p.subnet}, not the cluster subnet {ref}; {p.why}), while "
                           f"MASTER_ADDR is reached on {n.facts.get('interface')}"
                           for n, p in odd)
               + ". ddpnet.init() pins NCCL to the job's interface; a plain "
               "init_process_group('nccl') would bootstrap on the other network",
        fix="; ".join(f"on {n.label}: export NCCL_SOCKET_IFNAME=="
                      f"{interface_in(n, ref) or n.facts.get('interface')}" for n, _ in odd)
            + " (or start training with ddpnet.init())",
        evidence=tuple(f"rank {n.rank} on {n.label}: NCCL would pick {p.iface} {p.address} "
                       f"({p.why})" for n, p in odd),
        ruled_out=("ddpnet's own run: it pins NCCL to the job's interface",),
        confidence="high",
        see_for_yourself="NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET python train.py "
                         "(the 'NET/Socket' line names the interface)",
    )


def node_why(facts: Mapping[str, Any]) -> str:
    """``auto: routes to MASTER_ADDR ...``, or ``set by --local`` where the reason names its
    source already, for the node table (pure)."""
    why = facts.get("interface_why") or {}
    if not why:
        return ""
    source, reason = str(why.get("source", "?")), str(why.get("reason", ""))
    return reason if source in reason else f"{source}: {reason}"
