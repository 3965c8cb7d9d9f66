"""Container networking: the same bridge address on every node.

Docker gives every host ``docker0`` at 172.17.0.1; clones of one VM image share addresses
too. A rank that advertises such an address sends its peers to their own host. Ranks are
told apart by their network namespace (``netns``: the kernel's boot id and the namespace's
inode), not their hostname: ranks of one host share an address legitimately, and hostnames
repeat in containers. Rank 0 compares (pure); :func:`netns_id` is the edge.
"""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from ddpnet.check.causes import Cause
from ddpnet.check.compare import NodeFacts
from ddpnet.check.ifvars import interface_in


def netns_id(proc: Path = Path("/proc")) -> str:
    """This process's network namespace, unique across machines (edge; "" if unreadable)."""
    try:
        boot = (proc / "sys/kernel/random/boot_id").read_text().strip()
        return f"{boot}:{(proc / 'self/ns/net').stat().st_ino}"
    except OSError:
        return ""


def compare_addresses(nodes: Sequence[NodeFacts]) -> list[Cause]:
    """``duplicate-address``: one advertised address in several network namespaces."""
    by_address: dict[str, list[NodeFacts]] = defaultdict(list)
    for n in nodes:
        if n.facts.get("netns") and n.facts.get("address"):
            by_address[str(n.facts["address"])].append(n)
    causes = []
    for address, group in sorted(by_address.items()):
        if len({str(n.facts["netns"]) for n in group}) > 1:
            causes.append(_duplicate(address, group, nodes))
    return causes


def _shared_network(nodes: Sequence[NodeFacts], avoid: str) -> str | None:
    """A network every node has an address in, other than the duplicate's (pure)."""
    common: set[str] | None = None
    for n in nodes:
        nets = {net for cidrs in (n.facts.get("ifaddrs") or {}).values() for c in cidrs
                if (net := _network_of(c))}
        common = nets if common is None else common & nets
    try:
        bad = ipaddress.ip_address(avoid)
    except ValueError:
        return None
    return next((net for net in sorted(common or ())
                 if bad not in ipaddress.ip_network(net)), None)


def _network_of(cidr: object) -> str | None:
    try:
        return str(ipaddress.ip_interface(str(cidr)).network)
    except ValueError:
        return None


def _duplicate(address: str, group: Sequence[NodeFacts],
               nodes: Sequence[NodeFacts]) -> Cause:
    net = _shared_network(nodes, address)
    fixes = [f"on {n.label}: export GLOO_SOCKET_IFNAME={iface} NCCL_SOCKET_IFNAME=={iface}"
             for n in group if (iface := interface_in(n, net))]
    return Cause(
        id="duplicate-address", stage="facts",
        hosts=tuple(n.label for n in group), ranks=tuple(n.rank for n in group),
        detail=f"ranks on {len({n.facts['netns'] for n in group})} different hosts advertise "
               f"the same address {address}: "
               + ", ".join(f"rank {n.rank} on {n.host} ({n.facts.get('interface')})"
                           for n in group)
               + "; a peer connecting to it reaches its own host (a container bridge such "
               "as docker0, or a cloned VM's address)",
        fix=("pin the interface in the network the nodes share"
             + (f" ({net}): " + "; ".join(fixes) if fixes and net else
                ": export GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME=<cluster interface> on every "
                "node")
             + ", or give each node its own address there"),
        evidence=tuple(f"rank {n.rank} on {n.label} advertises {address} "
                       f"({n.facts.get('interface')}, network namespace {n.facts['netns']})"
                       for n in group),
        ruled_out=("ranks of one host: their network namespaces differ",),
        see_for_yourself=f"ip -br addr | grep -w {address}  # on each named host",
    )
