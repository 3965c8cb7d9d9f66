"""Advertised is not reachable: a translation (NAT, port forward, VIP, load balancer) between
ranks. The store and rank 0 are reached through it, but gloo/NCCL then connect every rank to
the addresses the others *advertise*, which may not be routable from them.

Two kinds of evidence, both gathered by rank 0 and judged here (pure):

- ``advertised-unreachable``: a rank reached the store at an address rank 0 does not have
  (``names.master`` against rank 0's ``own_addresses``): a VIP or port forward in front of
  rank 0 (a Kubernetes Service, ``docker -p``, an SSH tunnel). When those ranks cannot reach
  rank 0's own address, rank 0 is the one named (it sits behind the forward).
- ``behind-nat``: a rank whose mesh probes arrive at a peer from an address that is none of
  its own (its ``ifaddrs``): something rewrote its source on the way, a masquerading router
  between it and that peer. Every listener answers a probe with the address it saw, so each
  rank reports how every peer sees it (not only rank 0's view). Named only when peers then
  fail to reach what it advertises: a routed (untranslated) multi-subnet cluster arrives
  from its own addresses and passes.

Both return the matrix pairs they explain, so the mesh's firewall guesses leave them out.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ddpnet.check.causes import Cause
from ddpnet.check.mesh import Sampled
from ddpnet.output import rank_ranges

OK, SELF, UNKNOWN = "ok", "self", "?"

Pair = tuple[int, int]
Facts = Mapping[int, Mapping[str, Any]]


def _failed(matrix: Sequence[Sequence[str]], i: int, j: int) -> bool:
    return i < len(matrix) and j < len(matrix[i]) and matrix[i][j] not in (OK, SELF, UNKNOWN)


def translated(got: Facts) -> dict[int, str]:
    """Rank -> the address it reached the store at, for ranks that reached it at an address
    rank 0 does not have (not rank 0's own host)."""
    ref = got.get(0)
    if ref is None:
        return {}
    own = {str(a) for a in ref.get("own_addresses") or ()} | {str(ref.get("address"))}
    out = {}
    for r, f in got.items():
        seen = (f.get("names") or {}).get("master") or {}
        addrs = [str(a) for a in seen.get("addresses") or ()] if isinstance(seen, Mapping) \
            else []
        if r != 0 and addrs and addrs[0] not in own and str(f.get("address")) not in own:
            out[r] = addrs[0]
    return out


def own_addresses(facts: Mapping[str, Any]) -> set[str]:
    """Every address a rank has (its ``ifaddrs`` CIDRs and the one it advertises)."""
    out = {str(facts.get("address"))}
    for cidrs in (facts.get("ifaddrs") or {}).values():
        out.update(str(c).split("/")[0] for c in cidrs or ())
    return out


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return True  # not an address: no evidence


Seen = Mapping[int, Mapping[int, str]]


def natted(got: Facts, seen: Seen) -> dict[int, tuple[str, tuple[int, ...]]]:
    """Rank -> (the address its connections arrive from, the ranks that saw it so), for
    ranks whose probes reached some peer from none of their own addresses (a source NAT on
    the way). ``seen`` is each prober's report of what its peers saw: every rank's view, so
    a NAT between two workers shows even when rank 0 sits on the same side as one of them."""
    out = {}
    for k, by_peer in sorted(seen.items()):
        if k not in got or got[k].get("ifaddrs") is None:
            continue  # an older rank: no evidence
        own = own_addresses(got[k])
        foreign: dict[str, list[int]] = {}
        for j, src in sorted(by_peer.items()):
            if j != k and not _loopback(src) and src not in own:
                foreign.setdefault(src, []).append(j)
        if foreign:
            src, peers = max(foreign.items(), key=lambda kv: len(kv[1]))
            out[k] = (src, tuple(peers))
    return out


def analyze(matrix: Sequence[Sequence[str]], got: Facts, labels: Sequence[str],
            seen: Seen) -> tuple[list[Cause], set[Pair]]:
    """``advertised-unreachable`` and ``behind-nat`` with the matrix pairs they explain."""
    via = translated(got)
    causes: list[Cause] = []
    explained: set[Pair] = set()
    # the ranks that came through a forward and cannot reach rank 0's own address: rank 0
    # sits behind that forward, which is the forward's finding, not a NAT of its own
    blocked = [k for k in sorted(via) if _failed(matrix, k, 0)]
    nat = {k: s for k, s in natted(got, seen).items()
           if k not in via and not (k == 0 and blocked)}
    behind = _behind_nat(matrix, got, labels, nat, explained)
    if behind is not None:
        causes.append(behind)
    forwarded = _translated(matrix, got, labels, via, blocked, explained)
    if forwarded is not None:
        causes.append(forwarded)
    return causes, explained


def _ports(f: Mapping[str, Any]) -> str:
    return f"{f.get('address')}:{f.get('mesh_port')}"


def _behind_nat(matrix: Sequence[Sequence[str]], got: Facts, labels: Sequence[str],
                nat: Mapping[int, tuple[str, tuple[int, ...]]],
                explained: set[Pair]) -> Cause | None:
    items = []
    for k, (src, saw) in nat.items():
        into = [i for i in range(len(matrix)) if _failed(matrix, i, k)]
        if into:
            items.append((k, src, saw, into))
            explained.update((i, k) for i in into)
    if not items:
        return None
    subnet = str(got[0].get("subnet") or "the network rank 0 is on")
    return Cause(
        id="behind-nat", stage="reachability",
        hosts=tuple(labels[k] for k, *_ in items), ranks=tuple(k for k, *_ in items),
        detail="; ".join(
            f"rank {k} on {labels[k]} advertises {_ports(got[k])}, but its connections "
            f"arrive at {_ranks(saw)} from {src}, an address it does not have (a NAT rewrites "
            "them), and rank(s) " + ", ".join(f"{i} ({matrix[i][k]})" for i in into)
            + f" cannot reach {got[k].get('address')}" for k, src, saw, into in items)
        + ": gloo/NCCL connect to the advertised addresses, which the NAT hides",
        fix="put every rank on one routable network with no NAT between ranks (move "
            + ", ".join(labels[k] for k, *_ in items) + f" onto {subnet}, or route their "
            "subnet to the other nodes without masquerading; Docker: --network host; "
            "Kubernetes: hostNetwork: true)" + _pin_hint(got, [k for k, *_ in items], subnet),
        evidence=tuple(f"rank {k} on {labels[k]}: advertises {got[k].get('address')}, its "
                       f"connections arrive at {_ranks(saw)} from {src}" for k, src, saw, _ in
                       items),
        ruled_out=("a firewall: the connections arrive, from an address the rank does not "
                   "have",),
        see_for_yourself="ss -tn  # on a peer: the source address of the rank's connections",
    )


def _ranks(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + rank_ranges(ranks)


def _pin_hint(got: Facts, ranks: Iterable[int], subnet: str) -> str:
    """Where a NATed node also has an interface on rank 0's subnet: pin it."""
    try:
        net = ipaddress.ip_network(subnet, strict=False)
    except ValueError:
        return ""
    pins = []
    for k in ranks:
        for name, cidrs in (got[k].get("ifaddrs") or {}).items():
            if any(_in(c, net) for c in cidrs or ()):
                pins.append(f"on rank {k}: export GLOO_SOCKET_IFNAME={name} "
                            f"NCCL_SOCKET_IFNAME={name}")
                break
    return ("; or use their interface on that network: " + "; ".join(pins)) if pins else ""


def _in(cidr: str, net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    try:
        return ipaddress.ip_interface(str(cidr)).ip in net
    except ValueError:
        return False


def _translated(matrix: Sequence[Sequence[str]], got: Facts, labels: Sequence[str],
                via: Mapping[int, str], blocked: Sequence[int],
                explained: set[Pair]) -> Cause | None:
    """Ranks that reached the store through a translation: rank 0 named when they cannot
    reach its own address (it is behind the forward), else each such rank whose advertised
    address peers cannot reach (or that cannot reach the peers')."""
    rank0 = str(got[0].get("address")) if 0 in got else "?"
    explained.update((k, 0) for k in blocked)
    parts, ranks = [], []
    if blocked:
        ranks.append(0)
        parts.append(_rank0_line(blocked, via, got, matrix, labels))
    for k, reached in sorted(via.items()):
        into = [i for i in range(len(matrix)) if _failed(matrix, i, k)]
        out = [j for j in range(len(matrix)) if _failed(matrix, k, j) and (k, j) not in explained]
        if into or out:
            ranks.append(k)
            explained.update({(i, k) for i in into} | {(k, j) for j in out})
            parts.append(_line(k, reached, into, out, got, matrix, labels, rank0))
    if not parts:
        return None
    fix = ("make the advertised addresses reachable between all ranks: run the ranks in one "
           "routed network (Kubernetes: hostNetwork: true or a headless Service; Docker: "
           "--network host), or route/open them; MASTER_ADDR through a VIP works only when "
           f"the ranks also reach each other directly (and rank 0 at {rank0})")
    if blocked:
        fix = (f"run rank 0 where the other ranks reach its own address {rank0}, not only "
               f"through the forward at {', '.join(sorted({via[k] for k in blocked}))}: on "
               "their network (Docker: --network host; Kubernetes: hostNetwork: true), or "
               f"route {rank0} to them without NAT; forwarding MASTER_PORT is not enough, "
               "gloo/NCCL connect to every rank's own address on ephemeral ports")
    return Cause(
        id="advertised-unreachable", stage="reachability",
        hosts=tuple(labels[k] for k in ranks), ranks=tuple(ranks),
        detail="; ".join(parts) + ": the store is reached through a VIP, NAT or port-forward, "
               "but gloo/NCCL connect to the addresses the ranks advertise",
        fix=fix,
        evidence=tuple(parts),
        ruled_out=("the rendezvous: these ranks did reach the store",),
        see_for_yourself="nc -zv <advertised address> <port>  # from a peer",
    )


def _rank0_line(blocked: Sequence[int], via: Mapping[int, str], got: Facts,
                matrix: Sequence[Sequence[str]], labels: Sequence[str]) -> str:
    reached = sorted({via[k] for k in blocked})
    return (f"rank 0 on {labels[0]} advertises {_ports(got[0])}, but rank(s) "
            f"{', '.join(map(str, blocked))} reached the store at {', '.join(reached)} "
            "(not an address of rank 0: a port forward or NAT in front of it) and cannot "
            f"reach {got[0].get('address')} ("
            + ", ".join(f"{k} {matrix[k][0]}" for k in blocked) + ")")


def _line(k: int, reached: str, into: Sequence[int], out: Sequence[int], got: Facts,
          matrix: Sequence[Sequence[str]], labels: Sequence[str], rank0: str) -> str:
    f = got[k]
    text = (f"rank {k} on {labels[k]} reached the store at {reached} (not an address of rank "
            f"0, which is {rank0}) and advertises {_ports(f)}")
    if into:
        text += ", which rank(s) " + ", ".join(f"{i} ({matrix[i][k]})" for i in into) + \
            " cannot reach"
    if out:
        text += ("; it cannot reach the advertised address of rank(s) "
                 + ", ".join(f"{j} {got.get(j, {}).get('address')} ({matrix[k][j]})"
                             for j in out))
    return text


def masked(matrix: Sequence[Sequence[str]],
           explained: set[Pair]) -> Sequence[Sequence[str]]:
    """The matrix with the pairs a translation explains as unknown, for the mesh's own
    analysis (which would otherwise blame a firewall for them)."""
    if isinstance(matrix, Sampled):
        return matrix.without(explained)
    return [[UNKNOWN if (i, j) in explained else s for j, s in enumerate(row)]
            for i, row in enumerate(matrix)]


def settle_subnets(causes: Sequence[Cause], matrix: Sequence[Sequence[str]],
                   nat_ranks: Iterable[int], explained: Iterable[Pair] = ()) -> list[Cause]:
    """The facts stage's ``interface-mismatch`` for ranks in other subnets, settled with the
    mesh: ranks a NAT cause names, or whose failing pairs it explains (the ranks on the
    other side of the NAT), are that cause's (dropped); ranks that reach and are reached by
    every rank are a routed network, which works (a warning, never a failure)."""
    named = set(nat_ranks) | {r for pair in explained for r in pair}
    out = []
    for c in causes:
        if c.id != "interface-mismatch" or not c.data.get("subnets"):
            out.append(c)
            continue
        rest = [r for r in c.ranks if r not in named]
        if not rest:
            continue
        if c.severity == "fail" and all(_routed(matrix, r) for r in rest):
            c = replace(c, severity="warn",
                        detail=c.detail + "; every rank reaches every other (the networks are "
                        "routed to each other), so this works; named in case one of them is "
                        "not the network meant for training")
        out.append(c)
    return out


def _routed(matrix: Sequence[Sequence[str]], r: int) -> bool:
    n = len(matrix)
    if isinstance(matrix, Sampled):  # every probed pair that touches it
        statuses = matrix.touching(r)
        return r < n and bool(statuses) and all(s == OK for s in statuses)
    return r < n and all(matrix[r][j] in (OK, SELF) and matrix[j][r] in (OK, SELF)
                         for j in range(n))
