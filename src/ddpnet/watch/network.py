"""The "network" kind: every rank is inside the same collective and none progresses, so the
ranks are all waiting on the wire; the link probes (:mod:`ddpnet.watch.probe`, in
``Snapshot.probes``) say which link, port or node is at fault (pure).

Sub-kinds, tried in this order (the first that explains the failing probes wins):

- link down: every port of a peer times out or is unreachable from a rank (but when that peer
  published its state within ``FRESH_S`` seconds over its open connection, its host is up:
  a firewall dropping every new connection);
- firewall: one port of a peer answers (its side channel) while another (gloo's / NCCL's
  listener, or the sink) is refused or dropped;
- MTU: the connect works but a data stream gets (almost) nothing acknowledged;
- slow node: every stream to or from one rank is far below the fastest pair's rate (else a
  link slow both ways; one slow stream alone names nothing).

When several pairs fail and one rank is in all of them, that rank's node is named (its NIC,
port or firewall); otherwise each failing link. With no probes yet :func:`detect` says the
ranks are stuck and :func:`wants_probes` tells the watchdog to probe and analyse again; when
every probe passes it returns None (the network is not shown at fault).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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
    """The collective all ranks are in, when each published a state, none is gone, and each
    one's oldest unfinished collective is in the same group, one op per seq, and at most one
    seq apart (pure). One apart is the same stall: in a ring the others can finish a
    collective while one rank still waits for its last chunk, then wait in the next (seen in
    the lab with a firewall dropping one rank's gloo port); the earliest is named."""
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
    # each rank's start by its own clock, measured to the snapshot through it (never the
    # earliest start across ranks: their clocks differ)
    waited = max(snapshot.since(r, f.started) for r, f in enumerate(flights))
    return Stuck(group, seq, op, waited, tuple(range(snapshot.world_size)))


def wants_probes(snapshot: Snapshot) -> bool:
    """True when every rank is stuck in one collective and no link was probed yet: the
    watchdog should run :func:`ddpnet.watch.probe.probe_pairs` on every rank, then analyse the
    snapshot with the probes again."""
    return not snapshot.probes and stuck_collective(snapshot) is not None


def detect(snapshot: Snapshot, silent_after: float = FRESH_S) -> Diagnosis | None:
    """The network diagnosis: a silent node no peer can reach (its link is down), else, when
    every rank is inside the same collective, what the link probes show; None when neither
    (or when every probe passed). ``silent_after``: :func:`cut_off`'s."""
    cut = silent_link_down(snapshot, silent_after)
    if cut is not None:
        return cut
    stuck = stuck_collective(snapshot)
    if stuck is None:
        return None
    if not snapshot.probes:
        return _unprobed(snapshot, stuck)
    for finder in _FINDERS:
        found = finder(snapshot, stuck)
        if found is not None:
            return found
    return None


# ---- naming ---------------------------------------------------------------------------------


def name(states: States, rank: int) -> str:
    """``rank 2 (node2, eth0 198.18.0.3)``: what a user needs to find the machine."""
    state = states.get(rank)
    if state is None:
        return f"rank {rank}"
    where = " ".join(p for p in (state.interface, state.address) if p)
    inside = ", ".join(p for p in (state.host, where) if p)
    return f"rank {rank} ({inside})" if inside else f"rank {rank}"


def _host(states: States, rank: int) -> str:
    state = states.get(rank)
    return state.host if state is not None and state.host else f"rank {rank}'s host"


def _field(states: States, rank: int, attr: str, default: str) -> str:
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
    """(the words naming the node or links, ranks, hosts) for failing ``pairs``: ``node``,
    or the rank all of them share, or each link."""
    who = node if node is not None else culprit(pairs)
    if who is not None:
        return name(states, who), (who,), (_host(states, who),)
    links = sorted({tuple(sorted(p)) for p in pairs})
    words = "; ".join(f"{name(states, a)} <-> {name(states, b)}" for a, b in links[:4])
    ranks = tuple(sorted({r for p in links for r in p}))
    return words, ranks, tuple(dict.fromkeys(_host(states, r) for r in ranks))


def _evidence(stuck: Stuck, states: States,
              probes: Sequence[LinkProbe]) -> tuple[str, ...]:
    lines = [f"rank {p.src_rank} -> {name(states, p.dst_rank)}: {p.detail}" for p in probes]
    extra = [f"(+{len(lines) - MAX_EVIDENCE} more probe results)"] if len(lines) > MAX_EVIDENCE \
        else []
    return (_stuck_line(stuck), *lines[:MAX_EVIDENCE], *extra)


# ---- the sub-kinds --------------------------------------------------------------------------


def _witnesses(pairs: Mapping[Pair, object]) -> tuple[int, ...]:
    """The ranks whose probes found it (pure)."""
    return tuple(sorted({src for src, _dst in pairs}))


def _unprobed(snapshot: Snapshot, stuck: Stuck) -> Diagnosis:
    states = snapshot.states
    addrs = " ".join(_field(states, r, "address", "") for r in stuck.ranks[1:]).strip()
    return Diagnosis(
        kind=KIND,
        summary=_stuck_line(stuck) + "; the links were not probed yet",
        ranks=stuck.ranks, sub_kind=UNPROBED,
        hosts=tuple(dict.fromkeys(_host(states, r) for r in stuck.ranks)),
        evidence=(_stuck_line(stuck),
                  "no rank is behind and no rank skipped it: they wait on the network"),
        hint=(f"probe the links: from {_host(states, 0)} `for a in {addrs or '<peer>'}; do "
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
            if all(p.outcome in (TIMEOUT, UNREACHABLE) for p in probes)}
    if not down:
        return None
    states = snapshot.states
    if all(fresh(snapshot, dst) for _, dst in down):
        return _drops_all(snapshot, stuck, down)
    words, ranks, hosts = _where(states, list(down))
    who = culprit(list(down))
    iface = _field(states, who, "interface", "<iface>") if who is not None else "<iface>"
    at = hosts[0] if who is not None else "each end"
    peer = _field(states, next(iter(down))[1], "address", "<peer address>")
    return Diagnosis(
        kind=KIND,
        summary=f"{SUB_LABELS[LINK_DOWN]}: {words} answers on no port (dropped or "
                f"unreachable) while every rank waits in {stuck.op} #{stuck.seq}",
        ranks=ranks, hosts=hosts, sub_kind=LINK_DOWN, witnesses=_witnesses(down),
        evidence=_evidence(stuck, states, [p for ps in down.values()
                                                           for p in ps]),
        hint=f"on {at}: `ip -br link show {iface}` (state UP, carrier) and `ip -s link show "
             f"{iface}` (errors); check its cable / switch port; `ping -c3 {peer}` from a peer",
    )


def unreachable_from(snapshot: Snapshot, rank: int) -> tuple[int, ...]:
    """The ranks that probed ``rank`` when every connect to every port of it timed out or was
    unreachable (no answer at all, not even a refusal); empty when any answered or none was
    probed (pure)."""
    probes = [p for p in snapshot.probes if p.dst_rank == rank and p.what == CONNECT]
    if not probes or not all(p.outcome in (TIMEOUT, UNREACHABLE) for p in probes):
        return ()
    return tuple(sorted({p.src_rank for p in probes}))


def cut_off(snapshot: Snapshot, rank: int, silent_after: float = FRESH_S) -> bool:
    """A rank whose heartbeats stopped (none for ``silent_after`` s: the hub's own
    ``stale_after``, after which it probes the rank) while its side-channel connection stays
    open (no FIN, no RST: the process did not die) and that answers on no port: its link is
    down (pure). A dead process closes its connection and its host refuses; a stopped one
    still has a kernel that answers."""
    return (rank not in snapshot.gone and snapshot.age(rank) > silent_after
            and bool(unreachable_from(snapshot, rank)))


def silent_link_down(snapshot: Snapshot, silent_after: float = FRESH_S) -> Diagnosis | None:
    """The ranks :func:`cut_off` from every peer that probed them, named as a link down."""
    cut = [r for r in range(snapshot.world_size) if cut_off(snapshot, r, silent_after)]
    if not cut:
        return None
    states = snapshot.states
    first = cut[0]
    who = ", ".join(str(r) for r in unreachable_from(snapshot, first))
    words = "; ".join(name(states, r) for r in cut[:4])
    hosts = tuple(dict.fromkeys(_host(states, r) for r in cut))
    iface = _field(states, first, "interface", "<iface>")
    peer = _field(states, first, "address", "<its address>")
    probes = [p for p in snapshot.probes if p.dst_rank in cut and p.what == CONNECT]
    lines = [f"rank {p.src_rank} -> {name(states, p.dst_rank)}: {p.detail}"
             for p in probes[:MAX_EVIDENCE]]
    return Diagnosis(
        kind=KIND,
        summary=f"{SUB_LABELS[LINK_DOWN]}: "
                f"{words} sent no heartbeat for {snapshot.age(first):.0f} s and "
                f"answers on no port from rank(s) {who} (every connect dropped or "
                f"unreachable) while its connection stays open: its link is down (or its "
                f"host lost power)",
        ranks=tuple(cut), hosts=hosts, sub_kind=LINK_DOWN,
        witnesses=tuple(sorted({p.src_rank for p in probes})),
        evidence=(*lines, "a dead process would have closed its connection and a stopped one "
                          "would still answer; only a cut link (or a powered-off host) does "
                          "neither"),
        hint=f"on {hosts[0]}: `ip -br link show {iface}` (state UP, carrier), `ip -s link "
             f"show {iface}` (errors); check its cable / switch port; from a peer `ping -c3 "
             f"{peer}`; then restart the job from the last checkpoint",
    )


def fresh(snapshot: Snapshot, rank: int) -> bool:
    """The rank published its state within :data:`FRESH_S` of the snapshot (pure): its host
    is up and its own connections work."""
    return snapshot.age(rank) <= FRESH_S


def _drops_all(snapshot: Snapshot, stuck: Stuck,
               down: Mapping[Pair, list[LinkProbe]]) -> Diagnosis:
    """Every new connection to a peer is dropped, yet its heartbeat (an open connection) is
    fresh: an inbound firewall rule that keeps established connections, not a dead link."""
    states = snapshot.states
    targets = sorted({dst for _, dst in down})
    words = "; ".join(name(states, r) for r in targets[:4])
    hosts = tuple(dict.fromkeys(_host(states, r) for r in targets))
    ages = ", ".join(f"{snapshot.age(r):.0f} s" for r in targets[:4])
    return Diagnosis(
        kind=KIND,
        summary=f"{SUB_LABELS[FIREWALL]}: "
                f"every new connection to {words} is dropped (all its ports time "
                f"out), yet it published its state {ages} ago over an open connection: an "
                f"inbound firewall rule, not a dead link",
        ranks=tuple(targets), hosts=hosts, sub_kind=FIREWALL, witnesses=_witnesses(down),
        evidence=_evidence(stuck, states, [p for ps in down.values()
                                                           for p in ps]),
        hint=f"on {hosts[0]}: `nft list ruleset` / `iptables -S INPUT` shows the rule; allow the "
             f"cluster's nodes, e.g. `nft insert rule inet filter input ip saddr "
             f"<cluster-subnet> accept` or `firewall-cmd --zone=trusted "
             f"--add-source=<cluster-subnet>`",
    )


def _firewall(snapshot: Snapshot, stuck: Stuck) -> Diagnosis | None:
    """A peer answers on one port and refuses or drops another: a firewall rule."""
    blocked = {pair: [p for p in probes if not p.reachable and p.outcome in (REFUSED, TIMEOUT)]
               for pair, probes in _connects(snapshot).items()
               if any(p.reachable for p in probes)}
    blocked = {pair: ps for pair, ps in blocked.items() if ps}
    if not blocked:
        return None
    states = snapshot.states
    words, ranks, hosts = _where(states, list(blocked))
    ports = sorted({p.port for ps in blocked.values() for p in ps})
    how = sorted({"dropped" if p.outcome == TIMEOUT else "refused"
                  for ps in blocked.values() for p in ps})
    shown = ", ".join(map(str, ports))
    rules = " ".join(f"tcp dport {p} accept;" for p in ports)
    return Diagnosis(
        kind=KIND,
        summary=f"{SUB_LABELS[FIREWALL]}: "
                f"{words} answers on its side channel but TCP port(s) {shown} are "
                f"{'/'.join(how)}: a firewall rule blocks the backend's connections",
        ranks=ranks, hosts=hosts, sub_kind=FIREWALL, witnesses=_witnesses(blocked),
        evidence=_evidence(stuck, states,
                           [p for ps in blocked.values() for p in ps]),
        hint=f"on {hosts[0]}: `nft list ruleset` / `iptables -S INPUT` shows the rule; allow "
             f"the cluster's nodes, e.g. `nft insert rule inet filter input {rules}` or "
             f"`firewall-cmd --zone=trusted --add-source=<cluster-subnet>`",
    )


def _streams(snapshot: Snapshot) -> list[LinkProbe]:
    return [p for p in snapshot.probes if p.what == STREAM]


def _mtu(snapshot: Snapshot, stuck: Stuck) -> Diagnosis | None:
    """Connects work but full-size segments vanish: an MTU mismatch on the path."""
    stalled = [p for p in _streams(snapshot) if p.outcome == STALLED]
    if not stalled:
        return None
    states = snapshot.states
    words, ranks, hosts = _where(states, [(p.src_rank, p.dst_rank) for p in stalled])
    first = stalled[0]
    peer = _field(states, first.dst_rank, "address", "<peer address>")
    iface = _field(states, first.src_rank, "interface", "<iface>")
    return Diagnosis(
        kind=KIND,
        summary=f"{SUB_LABELS[MTU]}: {words}: connections open but full-size packets are "
                f"dropped (the MTU differs along the path)",
        ranks=ranks, hosts=hosts, sub_kind=MTU,
        witnesses=tuple(sorted({p.src_rank for p in stalled})),
        evidence=_evidence(stuck, states, stalled),
        hint=f"compare `ip link show {iface}` (mtu) on every node and the switch; from "
             f"{_host(states, first.src_rank)}: `ping -c2 -M do -s 1472 {peer}` (1500) and "
             f"`-s 8972` (9000); set one MTU everywhere, e.g. `ip link set {iface} mtu 1500`",
    )


def slow_pairs(streams: Sequence[LinkProbe], share: float = SLOW_SHARE) -> list[LinkProbe]:
    """Streams below ``share`` of the fastest measured rate (pure)."""
    rates = [p.rate_gbps for p in streams if p.rate_gbps is not None]
    if len(rates) < 2:
        return []
    fastest = max(rates)
    return [p for p in streams if p.rate_gbps is not None and p.rate_gbps < share * fastest]


@dataclass(frozen=True)
class Slow:
    """What the slow streams show: one node (``node``) or links (``links``), the streams."""

    node: int | None
    links: tuple[Pair, ...]
    streams: tuple[LinkProbe, ...]


def slow_where(streams: Sequence[LinkProbe], share: float = SLOW_SHARE) -> Slow | None:
    """The slow node, when every stream to or from one rank (two at least) is slow, else the
    links slow in both directions (pure). One slow stream alone names nothing: a short
    stream on a busy host can read low once; the same link read low both ways, or every
    link of a node, cannot by chance."""
    slow = slow_pairs(streams, share)
    if not slow:
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
    streams = _streams(snapshot)
    found = slow_where(streams)
    if found is None:
        return None
    states = snapshot.states
    words, ranks, hosts = _where(states, found.links, found.node)
    fastest = max(p.rate_gbps or 0.0 for p in streams)
    worst = min(p.rate_gbps or 0.0 for p in found.streams)
    iface = _field(states, ranks[0], "interface", "<iface>")
    return Diagnosis(
        kind=KIND,
        summary=f"{SUB_LABELS[SLOW_LINK]}: "
                f"{words} carries {worst:.3g} Gb/s where the fastest pair carries "
                f"{fastest:.3g} Gb/s",
        ranks=ranks, hosts=hosts, sub_kind=SLOW_LINK,
        witnesses=tuple(sorted({p.src_rank for p in found.streams})),
        evidence=_evidence(stuck, states, found.streams),
        hint=f"on {hosts[0]}: `ethtool {iface}` (Speed, Duplex), `ip -s link show {iface}` "
             f"(errors, drops), `tc qdisc show dev {iface}` (a shaper?)",
    )


_FINDERS: tuple[Callable[[Snapshot, Stuck], Diagnosis | None], ...] = (
    _link_down, _firewall, _mtu, _slow_node)
