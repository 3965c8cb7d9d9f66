"""The "network" kind: every rank is inside the same collective and none progresses; the link probes
say which link, port or node (pure; docs/watch-causes.md, "network", gives the rules)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ddpnet.net.probe import REFUSED, TIMEOUT, UNREACHABLE
from ddpnet.watch.probe import CONNECT, STALLED, STREAM
from ddpnet.watch.state import (
    FIREWALL,
    LINK_DOWN,
    MTU,
    SLOW_LINK,
    SUB_LABELS,
    UNPROBED,
    Diagnosis,
    LinkProbe,
    RankState,
    Snapshot,
)

KIND = "network"
#: a stream slower than this share of the fastest pair's rate is a slow link
SLOW_SHARE = 0.25
#: a state published this recently (seconds before the snapshot) proves its host is up
FRESH_S = 5.0
#: evidence lines kept per diagnosis
MAX_EVIDENCE = 8
#: no answer at all from a port: not even its host's kernel refusing
SILENT = (TIMEOUT, UNREACHABLE)

States = Mapping[int, RankState | None]
Pair = tuple[int, int]


@dataclass(frozen=True)
class Stuck:
    """The collective every rank is inside."""
    group: str
    seq: int
    op: str
    waited: float         # seconds the earliest rank has waited, as of the snapshot
    ranks: tuple[int, ...]


def stuck_collective(snapshot: Snapshot) -> Stuck | None:
    """The collective all ranks are in (pure): oldest unfinished ones in one group, at most one seq
    apart (in a ring the others can finish while one waits); the earliest."""
    if snapshot.gone or snapshot.world_size < 2:
        return None
    states = [snapshot.states.get(r) for r in range(snapshot.world_size)]
    flights = [f for f in (s.in_flight() if s is not None else None for s in states)
               if f is not None]
    if len(flights) != len(states):
        return None
    keys = {(f.group, f.seq, f.op) for f in flights}
    seqs = sorted({seq for _, seq, _ in keys})
    if len({g for g, _, _ in keys}) != 1 or len(keys) != len(seqs) or seqs[-1] - seqs[0] > 1:
        return None
    group, seq, op = min(keys, key=lambda k: k[1])
    # each rank's start by its own clock: ranks' clocks differ
    waited = max(snapshot.since(r, f.started) for r, f in enumerate(flights))
    return Stuck(group, seq, op, waited, tuple(range(snapshot.world_size)))


def wants_probes(snapshot: Snapshot) -> bool:
    """Every rank is stuck in one collective and no link was probed yet: probe them first."""
    return not snapshot.probes and stuck_collective(snapshot) is not None


def detect(snapshot: Snapshot, silent_after: float = FRESH_S) -> Diagnosis | None:
    """A silent node no peer can reach (its link is down), else what the link probes show
    when every rank is inside one collective; None when neither or every probe passed."""
    cut = silent_link_down(snapshot, silent_after)
    if cut is not None:
        return cut
    stuck = stuck_collective(snapshot)
    if stuck is None:
        return None
    if not snapshot.probes:
        return _unprobed(snapshot, stuck)
    for finder in (_link_down, _firewall, _mtu, _slow_node):
        found = finder(snapshot, stuck)
        if found is not None:
            return found
    return None


def name(states: States, rank: int) -> str:
    """``rank 2 (node2, eth0 198.18.0.3)``: what a user needs to find the machine."""
    state = states.get(rank)
    if state is None:
        return f"rank {rank}"
    where = " ".join(p for p in (state.interface, state.address) if p)
    inside = ", ".join(p for p in (state.host, where) if p)
    return f"rank {rank} ({inside})" if inside else f"rank {rank}"


def names(ranks: Iterable[int], limit: int = 8) -> str:
    """``0, 1, 2 and 5 more``: at most ``limit`` ranks in one line (1000-rank jobs)."""
    shown = [str(r) for r in ranks]
    return ", ".join(shown[:limit]) + (f" and {len(shown) - limit} more"
                                       if len(shown) > limit else "")


def host(states: States, rank: int) -> str:
    """The rank's host, or ``rank 3's host`` when it published none."""
    return field(states, rank, "host", f"rank {rank}'s host")


def hosts(states: States, ranks: Iterable[int]) -> tuple[str, ...]:
    """Each rank's :func:`host`, once, in the ranks' order."""
    return tuple(dict.fromkeys(host(states, r) for r in ranks))


def field(states: States, rank: int, attr: str, default: str) -> str:
    """A rank's state's ``attr`` (interface, address), ``default`` when it has none."""
    state = states.get(rank)
    value = getattr(state, attr, "") if state is not None else ""
    return str(value) if value else default


def _stuck_line(stuck: Stuck) -> str:
    return (f"all {len(stuck.ranks)} ranks are inside {stuck.op} #{stuck.seq} (group "
            f"{stuck.group}) since {stuck.waited:.0f} s and none progresses")


def culprit(pairs: Sequence[Pair]) -> int | None:
    """The one rank every failing pair involves, when there are two pairs or more (pure)."""
    if len(pairs) < 2:
        return None
    common = set.intersection(*({a, b} for a, b in pairs))
    return common.pop() if len(common) == 1 else None


def _where(states: States, pairs: Sequence[Pair], node: int | None = None
           ) -> tuple[str, tuple[int, ...], tuple[str, ...]]:
    """(words, ranks, hosts) naming ``node``, the rank all ``pairs`` share, or each link."""
    who = node if node is not None else culprit(pairs)
    if who is not None:
        return name(states, who), (who,), (host(states, who),)
    links = sorted({tuple(sorted(p)) for p in pairs})
    words = "; ".join(f"{name(states, a)} <-> {name(states, b)}" for a, b in links[:4])
    ranks = tuple(sorted({r for p in links for r in p}))
    return words, ranks, hosts(states, ranks)


def _probe_lines(states: States, probes: Sequence[LinkProbe]) -> list[str]:
    return [f"rank {p.src_rank} -> {name(states, p.dst_rank)}: {p.detail}" for p in probes]


def _evidence(stuck: Stuck, states: States, probes: Sequence[LinkProbe]) -> tuple[str, ...]:
    lines = _probe_lines(states, probes)
    extra = [f"(+{len(lines) - MAX_EVIDENCE} more probe results)"] if len(lines) > MAX_EVIDENCE \
        else []
    return (_stuck_line(stuck), *lines[:MAX_EVIDENCE], *extra)


def _witnesses(probes: Iterable[LinkProbe]) -> tuple[int, ...]:
    """The ranks whose probes found it (pure)."""
    return tuple(sorted({p.src_rank for p in probes}))


def link_hint(where: str, iface: str, also: str = "") -> str:
    """What to look at on a node whose link may be down (``also``: another command)."""
    return (f"on {where}: `ip -br link show {iface}` (state UP, carrier), `ip -s link show "
            f"{iface}` (errors){also}; check its cable / switch port")


def _firewall_hint(where: str, rule: str) -> str:
    return (f"on {where}: `nft list ruleset` / `iptables -S INPUT` shows the rule; allow the "
            f"cluster's nodes, e.g. `nft insert rule inet filter input {rule}` or "
            f"`firewall-cmd --zone=trusted --add-source=<cluster-subnet>`")


def _unprobed(snapshot: Snapshot, stuck: Stuck) -> Diagnosis:
    states = snapshot.states
    addrs = " ".join(field(states, r, "address", "") for r in stuck.ranks[1:]).strip()
    return Diagnosis(
        kind=KIND,
        summary=_stuck_line(stuck) + "; the links were not probed yet",
        ranks=stuck.ranks, sub_kind=UNPROBED, hosts=hosts(states, stuck.ranks),
        evidence=(_stuck_line(stuck),
                  "no rank is behind and no rank skipped it: they wait on the network"),
        hint=(f"probe the links: from {host(states, 0)} `for a in {addrs or '<peer>'}; do "
              f"ping -c2 -W1 $a; done` (the watchdog probes them itself next)"),
    )


def _connects(snapshot: Snapshot) -> dict[Pair, list[LinkProbe]]:
    out: dict[Pair, list[LinkProbe]] = {}
    for p in snapshot.probes:
        if p.what == CONNECT:
            out.setdefault((p.src_rank, p.dst_rank), []).append(p)
    return out


def _link_down(snapshot: Snapshot, stuck: Stuck) -> Diagnosis | None:
    """Every port of a peer dropped or unreachable: the link (or host) is down."""
    down = {pair: probes for pair, probes in _connects(snapshot).items()
            if all(p.outcome in SILENT for p in probes)}
    if not down:
        return None
    if all(fresh(snapshot, dst) for _, dst in down):
        return _drops_all(snapshot, stuck, down)
    states = snapshot.states
    words, ranks, where = _where(states, list(down))
    who = culprit(list(down))
    iface = field(states, who, "interface", "<iface>") if who is not None else "<iface>"
    peer = field(states, next(iter(down))[1], "address", "<peer address>")
    probes = [p for ps in down.values() for p in ps]
    return Diagnosis(
        kind=KIND,
        summary=f"{SUB_LABELS[LINK_DOWN]}: {words} answers on no port (dropped or "
                f"unreachable) while every rank waits in {stuck.op} #{stuck.seq}",
        ranks=ranks, hosts=where, sub_kind=LINK_DOWN, witnesses=_witnesses(probes),
        evidence=_evidence(stuck, states, probes),
        hint=link_hint(where[0] if who is not None else "each end", iface)
        + f"; `ping -c3 {peer}` from a peer",
    )


def unreachable_from(snapshot: Snapshot, rank: int) -> tuple[int, ...]:
    """The ranks that probed ``rank`` and got no answer on any port, not even a refusal (pure)."""
    probes = [p for p in snapshot.probes if p.dst_rank == rank and p.what == CONNECT]
    if not probes or not all(p.outcome in SILENT for p in probes):
        return ()
    return _witnesses(probes)


def cut_off(snapshot: Snapshot, rank: int, silent_after: float = FRESH_S) -> bool:
    """Silent for ``silent_after`` s with its connection open and no port answering: its link is
    down (pure). A dead process closes its connection; a stopped one's kernel still answers."""
    return (rank not in snapshot.gone and snapshot.age(rank) > silent_after
            and bool(unreachable_from(snapshot, rank)))


def silent_link_down(snapshot: Snapshot, silent_after: float = FRESH_S) -> Diagnosis | None:
    """The ranks :func:`cut_off` from every peer that probed them, named as a link down."""
    cut = [r for r in range(snapshot.world_size) if cut_off(snapshot, r, silent_after)]
    if not cut:
        return None
    states, first = snapshot.states, cut[0]
    who = ", ".join(str(r) for r in unreachable_from(snapshot, first))
    words = "; ".join(name(states, r) for r in cut[:4])
    where = hosts(states, cut)
    peer = field(states, first, "address", "<its address>")
    probes = [p for p in snapshot.probes if p.dst_rank in cut and p.what == CONNECT]
    return Diagnosis(
        kind=KIND,
        summary=f"{SUB_LABELS[LINK_DOWN]}: "
                f"{words} sent no heartbeat for {snapshot.age(first):.0f} s and "
                f"answers on no port from rank(s) {who} (every connect dropped or "
                f"unreachable) while its connection stays open: its link is down (or its "
                f"host lost power)",
        ranks=tuple(cut), hosts=where, sub_kind=LINK_DOWN, witnesses=_witnesses(probes),
        evidence=(*_probe_lines(states, probes[:MAX_EVIDENCE]),
                  "a dead process would have closed its connection and a stopped one would "
                  "still answer; only a cut link (or a powered-off host) does neither"),
        hint=link_hint(where[0], field(states, first, "interface", "<iface>"))
        + f"; from a peer `ping -c3 {peer}`; then restart the job from the last checkpoint",
    )


def fresh(snapshot: Snapshot, rank: int) -> bool:
    """The rank published within :data:`FRESH_S` (pure): its host and connections work."""
    return snapshot.age(rank) <= FRESH_S


def _drops_all(snapshot: Snapshot, stuck: Stuck,
               down: Mapping[Pair, list[LinkProbe]]) -> Diagnosis:
    """Every new connection to a peer is dropped, yet its heartbeat's open connection is
    fresh: an inbound firewall rule, not a dead link."""
    states = snapshot.states
    targets = sorted({dst for _, dst in down})
    where = hosts(states, targets)
    ages = ", ".join(f"{snapshot.age(r):.0f} s" for r in targets[:4])
    probes = [p for ps in down.values() for p in ps]
    return Diagnosis(
        kind=KIND,
        summary=f"{SUB_LABELS[FIREWALL]}: every new connection to "
                f"{'; '.join(name(states, r) for r in targets[:4])} is dropped (all its ports "
                f"time out), yet it published its state {ages} ago over an open connection: "
                f"an inbound firewall rule, not a dead link",
        ranks=tuple(targets), hosts=where, sub_kind=FIREWALL, witnesses=_witnesses(probes),
        evidence=_evidence(stuck, states, probes),
        hint=_firewall_hint(where[0], "ip saddr <cluster-subnet> accept"),
    )


def _firewall(snapshot: Snapshot, stuck: Stuck) -> Diagnosis | None:
    """A peer answers on one port and refuses or drops another: a firewall rule."""
    blocked = {pair: [p for p in probes if not p.reachable and p.outcome in (REFUSED, TIMEOUT)]
               for pair, probes in _connects(snapshot).items()
               if any(p.reachable for p in probes)}
    probes = [p for ps in blocked.values() for p in ps]
    if not probes:
        return None
    states = snapshot.states
    words, ranks, where = _where(states, [pair for pair, ps in blocked.items() if ps])
    ports = sorted({p.port for p in probes})
    how = sorted({"dropped" if p.outcome == TIMEOUT else "refused" for p in probes})
    return Diagnosis(
        kind=KIND,
        summary=f"{SUB_LABELS[FIREWALL]}: "
                f"{words} answers on its side channel but TCP port(s) "
                f"{', '.join(map(str, ports))} are {'/'.join(how)}: a firewall rule blocks "
                f"the backend's connections",
        ranks=ranks, hosts=where, sub_kind=FIREWALL, witnesses=_witnesses(probes),
        evidence=_evidence(stuck, states, probes),
        hint=_firewall_hint(where[0], " ".join(f"tcp dport {p} accept;" for p in ports)),
    )


def _mtu(snapshot: Snapshot, stuck: Stuck) -> Diagnosis | None:
    """Connects work but full-size segments vanish: an MTU mismatch on the path."""
    stalled = [p for p in snapshot.probes if p.what == STREAM and p.outcome == STALLED]
    if not stalled:
        return None
    states = snapshot.states
    words, ranks, where = _where(states, [(p.src_rank, p.dst_rank) for p in stalled])
    first = stalled[0]
    peer = field(states, first.dst_rank, "address", "<peer address>")
    iface = field(states, first.src_rank, "interface", "<iface>")
    return Diagnosis(
        kind=KIND,
        summary=f"{SUB_LABELS[MTU]}: {words}: connections open but full-size packets are "
                f"dropped (the MTU differs along the path)",
        ranks=ranks, hosts=where, sub_kind=MTU, witnesses=_witnesses(stalled),
        evidence=_evidence(stuck, states, stalled),
        hint=f"compare `ip link show {iface}` (mtu) on every node and the switch; from "
             f"{host(states, first.src_rank)}: `ping -c2 -M do -s 1472 {peer}` (1500) and "
             f"`-s 8972` (9000); set one MTU everywhere, e.g. `ip link set {iface} mtu 1500`",
    )


@dataclass(frozen=True)
class Slow:
    """What the slow streams show: one node (``node``) or links (``links``), the streams."""

    node: int | None
    links: tuple[Pair, ...]
    streams: tuple[LinkProbe, ...]


def slow_where(streams: Sequence[LinkProbe], share: float = SLOW_SHARE) -> Slow | None:
    """The slow node (every stream to or from one rank below ``share`` of the fastest), else the
    links slow both ways (pure). One slow stream alone names nothing."""
    rates = [p.rate_gbps for p in streams if p.rate_gbps is not None]
    bar = share * max(rates, default=0.0)
    slow = [p for p in streams if p.rate_gbps is not None and p.rate_gbps < bar]
    if len(rates) < 2 or not slow:
        return None
    slow_set = {(p.src_rank, p.dst_rank) for p in slow}
    measured = {(p.src_rank, p.dst_rank) for p in streams if p.rate_gbps is not None}
    who = culprit(sorted(slow_set))
    if who is not None and all(pair in slow_set for pair in measured if who in pair):
        return Slow(who, (), tuple(slow))
    links = tuple(sorted({(a, b) for a, b in slow_set if a < b and (b, a) in slow_set}))
    kept = tuple(p for p in slow if tuple(sorted((p.src_rank, p.dst_rank))) in links)
    return Slow(None, links, kept) if links else None


def _slow_node(snapshot: Snapshot, stuck: Stuck) -> Diagnosis | None:
    """Streams far slower than the fastest pair: a NIC that dropped its rate."""
    streams = [p for p in snapshot.probes if p.what == STREAM]
    found = slow_where(streams)
    if found is None:
        return None
    states = snapshot.states
    words, ranks, where = _where(states, found.links, found.node)
    fastest = max(p.rate_gbps or 0.0 for p in streams)
    worst = min(p.rate_gbps or 0.0 for p in found.streams)
    iface = field(states, ranks[0], "interface", "<iface>")
    return Diagnosis(
        kind=KIND,
        summary=f"{SUB_LABELS[SLOW_LINK]}: "
                f"{words} carries {worst:.3g} Gb/s where the fastest pair carries "
                f"{fastest:.3g} Gb/s",
        ranks=ranks, hosts=where, sub_kind=SLOW_LINK, witnesses=_witnesses(found.streams),
        evidence=_evidence(stuck, states, found.streams),
        hint=f"on {where[0]}: `ethtool {iface}` (Speed, Duplex), `ip -s link show {iface}` "
             f"(errors, drops), `tc qdisc show dev {iface}` (a shaper?)",
    )
