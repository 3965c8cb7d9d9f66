"""High latency on a node or a link: every round trip through one node (or across some
links) takes far longer than between the others (a ``tc netem delay`` left from a test, a
detour through a router, a VPN or tunnel, another site).

It looks like a slow link: a TCP flow carries at most its window per round trip, so at 40 ms
a stream that needs a 5 MB window and gets 2 MiB runs at 0.4 Gb/s on a 1 Gb/s link. But
``ethtool`` and the cable are fine there; what helps is a bigger window (``ddpnet tune``'s
sysctl part) or finding where the milliseconds come from. So the mesh's round trips
(``mesh.probe``: the kernel's handshake RTT) are judged first (:func:`find`), and the links
they explain are not also judged slow by bandwidth (:meth:`Latency.explained`).

Pure: rank 0 calls it with the published round trips, the measured rates and every host's
TCP buffer sysctls as its doctor read them.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ddpnet.check import mesh
from ddpnet.check.causes import Cause
from ddpnet.check.tournament import SLOW_FRACTION, same_host
from ddpnet.sysctl_profile import TIERS, Tier, last_field, profile_of

#: a round trip is high at FACTOR x the nearest-peer round trip of the healthy nodes, and at
#: least FLOOR_MS more: a ring all_reduce waits it 2(N-1) times per collective, while a
#: switch hop or a rack apart (tens of microseconds) is no finding
FACTOR, FLOOR_MS = 4.0, 2.0
#: the share of a TCP buffer limit a flow gets in flight: the kernel charges its own
#: per-packet overhead against it and advertises about half the receive buffer as window
WINDOW_SHARE = 0.5
#: a finding explains its links when they carry at least this share of what TCP's window
#: allows at its round trip; well below it something else limits them (a rate limit whose
#: queue a stream had filled when the probe met it): slow-node's, not high-latency's
EXPLAINED = 0.5
#: the sysctls that bound a flow's window (autotuning: the third field of tcp_rmem/tcp_wmem)
#: and what a socket may ask for itself (gloo and NCCL do not ask)
WINDOW_KEYS = ("net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "net.core.rmem_max",
               "net.core.wmem_max")

Pair = tuple[int, int]


def rtt_pairs(rows: Mapping[int, Any], world: int) -> dict[Pair, float]:
    """``(prober, peer) -> ms`` from the mesh rows every rank published (pure)."""
    return {(i, j): ms for i, value in rows.items()
            for j, ms in mesh.read_rtt(value, world).items() if i != j}


def rtt_matrix(rtt: Mapping[Pair, float], world: int) -> tuple[tuple[float | None, ...], ...]:
    """``rtt[i][j]``: the round trip rank i timed to rank j, None where not measured."""
    return tuple(tuple(rtt.get((i, j)) for j in range(world)) for i in range(world))


@dataclass(frozen=True)
class HighNode:
    """A node every pair through which is high: its rank and each peer's round trip (the
    faster of the two directions, in ms)."""

    rank: int
    pairs: tuple[tuple[int, float], ...]

    def triples(self) -> list[tuple[int, int, float]]:
        """Its pairs as ``(rank, peer, ms)``."""
        return [(self.rank, j, ms) for j, ms in self.pairs]


@dataclass(frozen=True)
class Latency:
    """What the round trips name: nodes whose every pair is high, then the high pairs left
    (``links``, between nodes not named), against ``baseline_ms``: the median of the other
    nodes' round trip to their nearest peer."""

    baseline_ms: float
    limit_ms: float
    nodes: tuple[HighNode, ...]
    links: tuple[tuple[int, int, float], ...]

    def explained(self) -> frozenset[Pair]:
        """Both directions of every pair named: its bandwidth is judged here, not as a
        slow link or node."""
        pairs = [(n.rank, j) for n in self.nodes for j, _ in n.pairs]
        pairs += [(i, j) for i, j, _ in self.links]
        return frozenset(p for i, j in pairs for p in ((i, j), (j, i)))


def _limit(ref: float) -> float:
    return max(FACTOR * ref, ref + FLOOR_MS)


def undirected(rtt: Mapping[Pair, float], addresses: Sequence[str | None]) -> dict[Pair, float]:
    """``(low, high) -> ms``: the faster direction of each pair that crosses a NIC and was
    timed both ways (two probes at two moments: a moment's queueing, a loaded host, slows
    one of them, a delay both; ranks of one host talk over loopback)."""
    out: dict[Pair, float] = {}
    for (i, j), ms in rtt.items():
        back = rtt.get((j, i))
        a = addresses[i] if i < len(addresses) else None
        b = addresses[j] if j < len(addresses) else None
        if i < j and back is not None and a is not None and b is not None \
                and not same_host(a, b):
            out[(i, j)] = min(ms, back)
    return out


def _nearest(pairs: Mapping[Pair, float]) -> dict[int, float]:
    """Each rank's fastest round trip (O(pairs))."""
    near: dict[int, float] = {}
    for (i, j), ms in pairs.items():
        for r in (i, j):
            near[r] = min(ms, near.get(r, ms))
    return near


def find(rtt: Mapping[Pair, float], addresses: Sequence[str | None]) -> Latency | None:
    """The nodes and links whose round trips are high against the others' (pure,
    O(pairs log pairs)); None when nothing is, or fewer than 3 ranks have pairs timed both
    ways across a NIC (two hosts have one pair: nothing to compare it with).

    A node whose fastest pair is high against the fastest pair of all is a candidate; the
    baseline is the other nodes' median round trip to their nearest peer (so two delayed
    nodes of four do not hide each other, and a second site's links do not set the bar);
    a candidate whose fastest pair is high against that baseline is named, then every pair
    between unnamed nodes that is."""
    pairs = undirected(rtt, addresses)
    near = _nearest(pairs)
    if len(near) < 3:
        return None
    fastest = min(near.values())
    candidates = {r for r, ms in near.items() if ms >= _limit(fastest)}
    baseline = statistics.median(ms for r, ms in near.items() if r not in candidates)
    limit = _limit(baseline)
    named = sorted(r for r in candidates if near[r] >= limit)
    through: dict[int, list[tuple[int, float]]] = {r: [] for r in named}
    links = []
    for (i, j), ms in sorted(pairs.items()):
        for r, other in ((i, j), (j, i)):
            if r in through:
                through[r].append((other, ms))
        if i not in through and j not in through and ms >= limit:
            links.append((i, j, ms))
    if not named and not links:
        return None
    return Latency(baseline, limit, tuple(HighNode(r, tuple(through[r])) for r in named),
                   tuple(links))


def _positive(number: int | None) -> int | None:
    """A buffer limit read (None: unread, or 0 and below: no limit worth the name)."""
    return number if number is not None and number > 0 else None


@dataclass(frozen=True)
class Window:
    """A host's TCP buffer limits in bytes, as its doctor read the sysctls (None: not
    readable there, e.g. a host-wide key inside a network namespace)."""

    tcp_rmem: int | None = None
    tcp_wmem: int | None = None
    rmem_max: int | None = None
    wmem_max: int | None = None

    @classmethod
    def of(cls, facts: Mapping[str, Any]) -> Window:
        """From a rank's published facts (the doctor's ``sysctl`` readings)."""
        raw = facts.get("sysctl")
        values = raw if isinstance(raw, Mapping) else {}
        return cls(*(_positive(last_field(values.get(k))) for k in WINDOW_KEYS))

    def text(self) -> str:
        shown = zip(("net.ipv4.tcp_rmem max", "net.ipv4.tcp_wmem max", *WINDOW_KEYS[2:]),
                    (self.tcp_rmem, self.tcp_wmem, self.rmem_max, self.wmem_max), strict=True)
        return ", ".join(f"{k} {v if v is not None else 'unread'}" for k, v in shown)


def in_flight(sender: Window, receiver: Window) -> int | None:
    """The most a flow from ``sender`` to ``receiver`` keeps in flight under autotuning:
    WINDOW_SHARE of the smaller of the sender's tcp_wmem and the receiver's tcp_rmem
    maximum (None when neither was read)."""
    known = [v for v in (sender.tcp_wmem, receiver.tcp_rmem) if v is not None]
    return int(min(known) * WINDOW_SHARE) if known else None


@dataclass(frozen=True)
class Throughput:
    """What a latency finding means for bandwidth: the rate the other links carry (Gb/s,
    median; None unmeasured), the finding's own links measured, whether they fall short
    (below SLOW_FRACTION of it), the bandwidth-delay product at that rate and the
    smallest window on its pairs (bytes), the ranks whose limits are below what the
    product needs, and the round trip it was worked out at (the pairs' median, ms)."""

    rate_gbps: float | None
    mine_gbps: tuple[float, ...]
    short: bool
    bdp_bytes: int | None
    window_bytes: int | None
    tight: tuple[int, ...]
    rtt_ms: float

    @property
    def window_limited(self) -> bool:
        return (self.bdp_bytes is not None and self.window_bytes is not None
                and self.bdp_bytes > self.window_bytes)

    @property
    def allowed_gbps(self) -> float | None:
        """What TCP carries at this round trip: a window per round trip, at most what the
        other links carry (None: the window unread)."""
        if self.window_bytes is None:
            return None
        cap = self.window_bytes * 8 / (self.rtt_ms / 1000) / 1e9
        return cap if self.rate_gbps is None else min(cap, self.rate_gbps)

    @property
    def explained(self) -> bool:
        """The round trip explains what its links carry: unmeasured, the window unread, or
        at least EXPLAINED x what the window allows at that round trip."""
        allowed = self.allowed_gbps
        return (not self.mine_gbps or allowed is None
                or statistics.median(self.mine_gbps) >= EXPLAINED * allowed)


def throughput(pairs: Sequence[tuple[int, int, float]], rates: Mapping[Pair, float],
               explained: frozenset[Pair], windows: Mapping[int, Window]) -> Throughput:
    """Throughput of the pairs ``(i, j, ms)`` of one finding (pure): their measured rates
    against the links no latency explains, the product of that rate and their median
    round trip against their smallest window."""
    directed = [(a, b) for i, j, _ in pairs for a, b in ((i, j), (j, i))]
    mine = tuple(rates[p] for p in directed if p in rates)
    rest = [v for p, v in rates.items() if p not in explained]
    rate = statistics.median(rest) if rest else None
    ms = statistics.median(m for _, _, m in pairs)
    bdp = int(rate * 1e9 / 8 * ms / 1000) if rate is not None else None
    flights = [f for a, b in directed
               if (f := in_flight(windows.get(a, Window()), windows.get(b, Window()))) is not None]
    window = min(flights) if flights else None
    ranks = sorted({r for p in directed for r in p})
    tight = tuple(r for r in ranks if bdp is not None and any(
        v is not None and v * WINDOW_SHARE < bdp
        for v in (windows.get(r, Window()).tcp_rmem, windows.get(r, Window()).tcp_wmem)))
    short = rate is not None and bool(mine) and statistics.median(mine) < SLOW_FRACTION * rate
    return Throughput(rate, mine, short, bdp, window, tight, ms)


def consistent(found: Latency | None, rates: Mapping[Pair, float],
               windows: Mapping[int, Window]) -> Latency | None:
    """The finding less the nodes and links whose measured links carry well below what
    the window allows at their round trip (pure): a rate-limited node whose queue a
    stream had filled when a probe met it has high round trips too, and stays slow-node.
    None when nothing is left."""
    if found is None:
        return None
    explained = found.explained()
    nodes = tuple(n for n in found.nodes
                  if throughput(n.triples(), rates, explained, windows).explained)
    links = tuple(link for link in found.links
                  if throughput([link], rates, explained, windows).explained)
    if not nodes and not links:
        return None
    return replace(found, nodes=nodes, links=links)


def tier_for_bdp(bdp_bytes: int) -> Tier:
    """The smallest ``ddpnet tune`` profile whose autotuning maximum keeps the product in
    flight (WINDOW_SHARE of it); the largest when none does."""
    for tier in reversed(TIERS):
        if tier.autotune_max * WINDOW_SHARE >= bdp_bytes:
            return tier
    return TIERS[0]


def tune_fix(bdp_bytes: int, hosts: Sequence[str], subnet: str) -> str:
    """The window fix: ``ddpnet tune``'s sysctl part at the profile the product needs, and
    the same values for now (pure)."""
    tier = tier_for_bdp(bdp_bytes)
    targets = profile_of(tier).targets
    now = " ".join(f"{k}='{t.recommended}'" if " " in t.recommended else f"{k}={t.recommended}"
                   for k in WINDOW_KEYS if (t := targets.get(k)) is not None)
    return (f"on {', '.join(hosts)}: raise TCP's buffer limits to what the bandwidth-delay "
            f"product needs ({_mb(bdp_bytes)} in flight): sudo ddpnet tune --cluster-subnet "
            f"{subnet} --profile {tier.name} --apply (its sysctl part writes "
            f"/etc/sysctl.d/90-ddpnet.conf; without --apply it shows the change), or now: "
            f"sysctl -w {now}")


def _mb(nbytes: int | float) -> str:
    return f"{nbytes / 1e6:.1f} MB"


@dataclass(frozen=True)
class Where:
    """What the fixes name of each rank: label, address, interface; and the cluster subnet
    (for ``ddpnet tune``)."""

    labels: Sequence[str]
    addresses: Sequence[str | None]
    interfaces: Sequence[str | None]
    subnet: str

    def source_fix(self, rank: int, peer: int, ms: float) -> str:
        """Where a node's milliseconds come from (pure)."""
        iface = self.interfaces[rank] or "<iface>"
        to = self.addresses[peer] or "<peer address>"
        return (f"on {self.labels[rank]}: find where the {ms:.0f} ms to {to} come from: tc "
                f"qdisc show dev {iface} (a netem delay left from a test), ip route get {to} "
                f"and tracepath {to} (a detour: a router, a VPN or tunnel, another site)")


def _span(values: Sequence[float], digits: int) -> str:
    """``0.41-0.47``, or one value when they agree to ``digits``."""
    low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return low if low == high else f"{low}-{high}"


def _rates_text(t: Throughput) -> str:
    if t.rate_gbps is None:
        return "bandwidth not measured"
    if not t.mine_gbps:
        return f"its links not measured; the others carry {t.rate_gbps:.2f} Gb/s"
    return (f"its links carry {_span(t.mine_gbps, 2)} Gb/s while the others carry "
            f"{t.rate_gbps:.2f} Gb/s (median)")


def _window_text(t: Throughput) -> str:
    if t.bdp_bytes is None:
        return "the window is not judged without a measured rate"
    window = _mb(t.window_bytes) if t.window_bytes is not None else "unread"
    verdict = ("the window caps the flow below the link's rate" if t.window_limited else
               "the window holds it")
    return (f"bandwidth-delay product {_mb(t.bdp_bytes)} at {t.rate_gbps:.2f} Gb/s, "
            f"TCP window {window} ({WINDOW_SHARE:g} x the smaller of tcp_wmem and tcp_rmem "
            f"max): {verdict}")


def _fix(t: Throughput, where: Where, source: str) -> str:
    if t.window_limited and t.bdp_bytes is not None:
        hosts = [where.labels[r] for r in t.tight] or ["every host"]
        return f"{tune_fix(t.bdp_bytes, hosts, where.subnet)}; and {source}"
    return source


def _evidence(pairs: Sequence[tuple[int, int, float]], t: Throughput, where: Where,
              windows: Mapping[int, Window], baseline: float) -> tuple[str, ...]:
    labels = where.labels
    rows = [_rates_text(t), _window_text(t),
            f"the other nodes' round trip to their nearest peer: {baseline:.2f} ms (median)"]
    rows += [f"rank {i} on {labels[i]} <-> rank {j} on {labels[j]}: {ms:.2f} ms round trip"
             for i, j, ms in pairs]
    ranks = sorted({r for i, j, _ in pairs for r in (i, j)})
    rows += [f"{labels[r]}: {windows[r].text()}" for r in ranks if r in windows]
    return tuple(rows)


def node_cause(node: HighNode, found: Latency, t: Throughput, where: Where,
               windows: Mapping[int, Window], stage: str) -> Cause:
    """``high-latency`` for a node every round trip through which is high (pure)."""
    r, labels = node.rank, where.labels
    ms = [m for _, m in node.pairs]
    pairs = node.triples()
    peer = min(node.pairs, key=lambda p: p[1])[0]
    why = (": TCP's window caps each flow at that round trip" if t.window_limited else "")
    return Cause(
        id="high-latency", stage=stage, severity="fail" if t.short else "warn",
        hosts=(labels[r],), ranks=(r,),
        detail=f"every round trip through rank {r} on {labels[r]} takes {_span(ms, 1)} ms "
               "while the other nodes reach their nearest peer in "
               f"{found.baseline_ms:.2f} ms (median; limit {found.limit_ms:.2f} ms); "
               f"{_rates_text(t)}{why}",
        fix=_fix(t, where, where.source_fix(r, peer, statistics.median(ms))),
        evidence=_evidence(pairs, t, where, windows, found.baseline_ms),
        ruled_out=("a slow NIC, cable or shaping (slow-node): the time is in the round trip, "
                   "which a rate limit does not add to an idle link",
                   "a busy host: the round trips are the kernel's handshake timing, not a "
                   "process's"),
        confidence="high" if t.short and t.window_limited else "medium",
        see_for_yourself=f"ping -c 10 {where.addresses[r] or labels[r]}  # from a peer; "
                         f"on {labels[r]}: tc qdisc show dev {where.interfaces[r] or '<iface>'}",
        data={"rtt_ms": {str(j): m for j, m in node.pairs}, "baseline_ms": found.baseline_ms,
              "bdp_bytes": t.bdp_bytes, "window_bytes": t.window_bytes},
    )


def links_cause(found: Latency, t: Throughput, where: Where, windows: Mapping[int, Window],
                stage: str) -> Cause:
    """``high-latency`` for high pairs between nodes that are not high themselves (two
    sites, a routed detour) (pure)."""
    links, labels = found.links, where.labels
    ranks = sorted({r for i, j, _ in links for r in (i, j)})
    i, j, ms = max(links, key=lambda link: link[2])
    return Cause(
        id="high-latency", stage=stage, severity="fail" if t.short else "warn",
        hosts=tuple(labels[r] for r in ranks), ranks=tuple(ranks),
        detail="round trips above " f"{found.limit_ms:.2f} ms (the nodes' nearest peer: "
               f"{found.baseline_ms:.2f} ms, median): "
               + ", ".join(f"{a}<->{b} {m:.1f} ms" for a, b, m in links[:20])
               + f"; {_rates_text(t)}",
        fix=_fix(t, where, where.source_fix(i, j, ms)),
        evidence=_evidence(links, t, where, windows, found.baseline_ms),
        ruled_out=("a slow link (slow-link): the time is in the round trip, which a rate "
                   "limit does not add to an idle link",),
        confidence="medium",
        see_for_yourself=f"ping -c 10 {where.addresses[j] or labels[j]}  # on {labels[i]}",
        data={"links": [[a, b, m] for a, b, m in links], "baseline_ms": found.baseline_ms},
    )


def causes(found: Latency, rates: Mapping[Pair, float], windows: Mapping[int, Window],
           where: Where, stage: str) -> list[Cause]:
    """Every ``high-latency`` cause of a finding (pure): one per node, one for the links."""
    explained = found.explained()
    out = [node_cause(n, found, throughput(n.triples(), rates, explained, windows), where,
                      windows, stage) for n in found.nodes]
    if found.links:
        out.append(links_cause(found, throughput(found.links, rates, explained, windows),
                               where, windows, stage))
    return out
