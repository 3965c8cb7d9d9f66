"""Several networks between the nodes: is the job on the slow one?

A cluster often has a management network (1 GbE, where hostnames resolve and ssh goes) and a
fast one (100 GbE, IPoIB). ``MASTER_ADDR`` given as a hostname, or the route to it, puts
gloo's traffic and NCCL's socket transport on the management network; training then runs at a
fraction of the speed the hardware has, and nothing fails.

Rank 0 finds the other networks every host shares (:func:`alternatives`: a subnet in which
every host has an up interface, other than the one the job uses, with distinct addresses, so a
docker0 or virbr0 that every host has alike is not one), compares the links' nominal speeds
(``/sys/class/net/X/speed``) and, unless those already show the job's network is the faster,
has one rank on another host stream to rank 0 over each network for a moment
(:mod:`ddpnet.check.stages.networks`). :func:`judge` names a network at least
:data:`FASTER` times faster. Everything here is pure.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ddpnet.check.causes import Cause
from ddpnet.check.compare import NodeFacts
from ddpnet.check.ifvars import cluster_subnet

#: a network this many times faster than the job's is named (nominal or measured)
FASTER = 2.0
#: at most this many other networks are measured (each costs :data:`SECONDS`)
MAX_ALTERNATIVES = 3
#: how long the sender streams over each network
SECONDS = 0.5
#: interface kinds that are never a network between hosts
_LOCAL_KINDS = ("loopback", "docker")


@dataclass(frozen=True)
class Leg:
    """One host's interface on a network."""

    rank: int
    iface: str
    address: str
    speed_mbps: int | None


@dataclass(frozen=True)
class Network:
    """A subnet every host has an interface in: one leg per host."""

    subnet: str
    legs: tuple[Leg, ...]

    @cached_property
    def _by_rank(self) -> dict[int, Leg]:
        return {g.rank: g for g in self.legs}

    def leg(self, rank: int) -> Leg | None:
        """This host's leg (by its lowest rank): a lookup, so comparing two networks of N
        hosts stays O(N)."""
        return self._by_rank.get(rank)

    @property
    def interfaces(self) -> str:
        """``eth1`` when every host names it so, else ``eth1, ib0``."""
        return ", ".join(dict.fromkeys(g.iface for g in self.legs))

    def nominal(self) -> str:
        speeds = sorted({g.speed_mbps for g in self.legs if g.speed_mbps})
        if not speeds:
            return "speed unknown"
        shown = f"{speeds[0]}-{speeds[-1]}" if len(speeds) > 1 else str(speeds[0])
        return f"{shown} Mb/s" + ("" if all(g.speed_mbps for g in self.legs) else " (some unknown)")


@dataclass(frozen=True)
class Plan:
    """What to measure: ``sender`` streams to rank 0 over ``chosen``, then each of ``others``."""

    sender: int
    chosen: Network
    others: tuple[Network, ...]

    @property
    def networks(self) -> tuple[Network, ...]:
        return (self.chosen, *self.others)


def hosts(nodes: Sequence[NodeFacts]) -> list[NodeFacts]:
    """One node per host (the lowest rank of each advertised address): ranks of one host
    share its interfaces."""
    seen: dict[str, NodeFacts] = {}
    for n in sorted(nodes, key=lambda n: n.rank):
        address = str(n.facts.get("address") or "")
        if address and address not in seen:
            seen[address] = n
    return list(seen.values())


def _link(n: NodeFacts, iface: str) -> Mapping[str, Any]:
    links = n.facts.get("links")
    value = links.get(iface) if isinstance(links, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _speed(n: NodeFacts, iface: str) -> int | None:
    value = _link(n, iface).get("speed_mbps")
    return int(value) if isinstance(value, int) and value > 0 else None


def chosen_network(hosts_: Sequence[NodeFacts]) -> Network | None:
    """The network the job uses: the cluster subnet, each host's selected interface."""
    subnet = cluster_subnet(hosts_)
    if subnet is None:
        return None
    legs = tuple(Leg(n.rank, str(n.facts.get("interface")), str(n.facts.get("address")),
                     _speed(n, str(n.facts.get("interface"))))
                 for n in hosts_ if n.facts.get("subnet") == subnet)
    return Network(subnet, legs) if len(legs) == len(hosts_) else None


def _candidates(n: NodeFacts) -> dict[str, Leg]:
    """Subnet -> this host's leg in it, over its up interfaces that could join hosts (not
    the job's own interface, not loopback or docker)."""
    out: dict[str, Leg] = {}
    ifaddrs = n.facts.get("ifaddrs")
    for name, cidrs in sorted(ifaddrs.items() if isinstance(ifaddrs, Mapping) else ()):
        link = _link(n, name)
        if name == n.facts.get("interface") or link.get("kind") in _LOCAL_KINDS \
                or link.get("up") is False:
            continue
        for cidr in cidrs or ():
            try:
                iface = ipaddress.ip_interface(str(cidr))
            except ValueError:
                continue
            if iface.ip.is_loopback or iface.ip.is_link_local:
                continue
            out.setdefault(str(iface.network), Leg(n.rank, name, str(iface.ip),
                                                   _speed(n, name)))
    return out


def alternatives(hosts_: Sequence[NodeFacts], chosen: Network) -> list[Network]:
    """Other subnets every host has a leg in, with one address per host (pure)."""
    per_host = [_candidates(n) for n in hosts_]
    if not per_host:
        return []
    try:
        job = ipaddress.ip_network(chosen.subnet)
    except ValueError:
        return []
    out = []
    for subnet in sorted(set.intersection(*(set(c) for c in per_host))):
        legs = tuple(c[subnet] for c in per_host)
        if len({g.address for g in legs}) == len(legs) and \
                not ipaddress.ip_network(subnet).overlaps(job):
            out.append(Network(subnet, legs))
    return out


def nominal_ratio(chosen: Network, other: Network) -> float | None:
    """How many times faster ``other``'s links are than the job's on the host where the gap
    is smallest; None when any host's speed is unknown (virtual links, tc shaping)."""
    ratios = []
    for g in chosen.legs:
        o = other.leg(g.rank)
        if o is None or not g.speed_mbps or not o.speed_mbps:
            return None
        ratios.append(o.speed_mbps / g.speed_mbps)
    return min(ratios) if ratios else None


def plan(nodes: Sequence[NodeFacts]) -> Plan | None:
    """Rank 0's plan, or None when there is nothing to compare: one host, no other shared
    network, or every other network nominally slower than the job's. Equal link speeds are
    measured: a 10 GbE port on a congested or shaped path runs at a fraction of it."""
    hosts_ = hosts(nodes)
    if len(hosts_) < 2 or hosts_[0].rank != 0:
        return None
    chosen = chosen_network(hosts_)
    if chosen is None:
        return None
    others = [o for o in alternatives(hosts_, chosen)
              if (r := nominal_ratio(chosen, o)) is None or r >= 1.0][:MAX_ALTERNATIVES]
    if not others:
        return None
    return Plan(sender=hosts_[1].rank, chosen=chosen, others=tuple(others))


@dataclass(frozen=True)
class Faster:
    """Another network and the evidence that it is faster."""

    network: Network
    measured: float | None  # times faster, as streamed
    nominal: float | None  # times faster, link speeds


def faster(p: Plan, gbps: Sequence[float | None]) -> Faster | None:
    """The fastest other network at least :data:`FASTER` times faster than the job's, by
    measurement, or by nominal speed where the measurement does not contradict it."""
    base = gbps[0] if gbps else None
    best: Faster | None = None
    for i, other in enumerate(p.others, start=1):
        rate = gbps[i] if i < len(gbps) else None
        measured = rate / base if rate and base else None
        nominal = nominal_ratio(p.chosen, other)
        by_nominal = nominal is not None and nominal >= FASTER and (
            measured is None or measured >= 1.0)
        if not ((measured is not None and measured >= FASTER) or by_nominal):
            continue
        score = measured if measured is not None else nominal or 0.0
        if best is None or score > (best.measured or best.nominal or 0.0):
            best = Faster(other, measured, nominal)
    return best


def _rate(gbps: float | None) -> str:
    return f"{gbps:.2f} Gb/s" if gbps is not None else "not measured"


def _exports(f: Faster, labels: Mapping[int, str], limit: int = 8) -> str:
    """The interface variables to export: once when every host names the interface alike,
    else per host (the first ``limit``)."""
    names = list(dict.fromkeys(g.iface for g in f.network.legs))
    if len(names) == 1:
        return f"export GLOO_SOCKET_IFNAME={names[0]} NCCL_SOCKET_IFNAME=={names[0]} on " \
               "every node"
    shown = [f"on {labels.get(g.rank, g.rank)}: export GLOO_SOCKET_IFNAME={g.iface} "
             f"NCCL_SOCKET_IFNAME=={g.iface}" for g in f.network.legs[:limit]]
    more = len(f.network.legs) - limit
    return "; ".join(shown) + (f"; and so on for {more} more hosts" if more > 0 else "")


def judge(p: Plan, gbps: Sequence[float | None], labels: Mapping[int, str]) -> Cause | None:
    """``slower-network-chosen`` (a warning: training works, at the slow network's speed)."""
    f = faster(p, gbps)
    if f is None:
        return None
    rank0 = f.network.leg(0)
    times = f.measured if f.measured is not None else f.nominal or 0.0
    how = "measured" if f.measured is not None else "by link speed"
    sender = labels.get(p.sender, str(p.sender))
    return Cause(
        id="slower-network-chosen", stage="networks", severity="warn",
        hosts=(labels.get(0, "0"), sender), ranks=(0, p.sender),
        detail=f"the job's traffic goes over {p.chosen.subnet} ({p.chosen.interfaces}, "
               f"{p.chosen.nominal()}; {_rate(gbps[0] if gbps else None)} from rank "
               f"{p.sender} on {sender} to rank 0), while every node also has "
               f"{f.network.subnet} ({f.network.interfaces}, {f.network.nominal()}; "
               f"{_rate(gbps[p.others.index(f.network) + 1])}), {times:.1f}x faster "
               f"{how}: gloo and NCCL's socket transport (its bootstrap, or all of it "
               "without InfiniBand/RoCE) use the slower network",
        fix=f"use the fast network: set MASTER_ADDR to rank 0's address on it "
            f"({rank0.address if rank0 else '?'}) and {_exports(f, labels)} (or have the "
            "hostnames resolve to the fast network's addresses)",
        data={"subnet": f.network.subnet, "times": round(times, 2)},
        evidence=(f"the job's network {p.chosen.subnet}: {_rate(gbps[0] if gbps else None)} "
                  f"from rank {p.sender} to rank 0",
                  f"{f.network.subnet} on every node: "
                  f"{_rate(gbps[p.others.index(f.network) + 1])}, {times:.1f}x faster {how}"),
        confidence="high" if f.measured is not None else "medium",
        see_for_yourself=f"ip -br addr; ethtool <iface> | grep Speed  # on {sender}",
    )


def summary(p: Plan, gbps: Sequence[float | None]) -> list[dict[str, Any]]:
    """What was compared, for the JSON report (pure)."""
    out = []
    for i, net in enumerate(p.networks):
        out.append({"subnet": net.subnet, "interfaces": net.interfaces,
                    "nominal": net.nominal(), "job": i == 0,
                    "gbps": gbps[i] if i < len(gbps) else None})
    return out


def note(p: Plan, gbps: Sequence[float | None]) -> str:
    """One line for the report's notes."""
    parts = [f"{n['subnet']} ({n['interfaces']}{', the job' if n['job'] else ''}) "
             f"{_rate(n['gbps'])}" for n in summary(p, gbps)]
    return (f"networks: rank {p.sender} streamed to rank 0 for {SECONDS:g} s over each: "
            + "; ".join(parts))
