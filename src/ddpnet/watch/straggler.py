"""The "straggler" kind (no hang): a rank, link or the network consistently slower over a window of
steps (pure; docs/watch-causes.md, "straggler", gives the rules)."""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from ddpnet.watch.network import field, host, hosts, name, slow_where
from ddpnet.watch.probe import STREAM
from ddpnet.watch.state import Diagnosis, RankState, Snapshot

KIND = "straggler"
RATIO = 1.25
MIN_STEPS = 5
#: share of the window's steps in which a rank must be slow
CONSISTENT = 0.8
WINDOW = 50
#: below this many seconds per step, extra waits or compute are noise
MIN_WAIT_S = 0.005
#: extra compute must also cost (ratio - 1) x this share of the median step
MIN_SHARE = 0.25


@dataclass(frozen=True)
class Params:
    ratio: float = RATIO
    min_steps: int = MIN_STEPS
    consistent: float = CONSISTENT
    window: int = WINDOW


@dataclass(frozen=True)
class StragglerWindow:
    """The last ``size`` steps' wall and collective seconds, as a heartbeat publishes them
    (immutable: ``add`` returns the next window)."""

    size: int = WINDOW
    step_times: tuple[float, ...] = ()
    wait_times: tuple[float, ...] = ()

    def add(self, step_s: float, wait_s: float) -> StragglerWindow:
        keep = max(1, self.size)
        return replace(self, step_times=(*self.step_times, float(step_s))[-keep:],
                       wait_times=(*self.wait_times, float(min(wait_s, step_s)))[-keep:])


def union(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The spans merged into sorted, disjoint ones (pure)."""
    out: list[tuple[float, float]] = []
    for lo, hi in sorted(s for s in spans if s[1] > s[0]):
        if out and lo <= out[-1][1]:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def waits_per_step(steps: Sequence[tuple[float, float]],
                   spans: Iterable[tuple[float, float]]) -> list[float]:
    """For each step (start, end), the seconds inside any of ``spans``, overlaps once (pure)."""
    merged = union(spans)
    ends = [hi for _, hi in merged]
    out = []
    for start, end in steps:
        total, i = 0.0, bisect.bisect_right(ends, start)
        while i < len(merged) and merged[i][0] < end:
            total += min(merged[i][1], end) - max(merged[i][0], start)
            i += 1
        out.append(total)
    return out


@dataclass(frozen=True)
class Times:
    """Aligned last-n steps of the ranks that published enough; ``comp``: step - wait."""

    ranks: tuple[int, ...]
    step: Mapping[int, tuple[float, ...]]
    wait: Mapping[int, tuple[float, ...]]
    comp: Mapping[int, tuple[float, ...]]

    @classmethod
    def of(cls, step: Mapping[int, tuple[float, ...]],
           wait: Mapping[int, tuple[float, ...]]) -> Times:
        comp = {r: tuple(max(0.0, s - w) for s, w in zip(step[r], wait[r], strict=True))
                for r in step}
        return cls(tuple(sorted(step)), step, wait, comp)

    @property
    def steps(self) -> int:
        return len(next(iter(self.step.values()))) if self.step else 0

    def tail(self, n: int) -> Times:
        """The last ``n`` steps only."""
        return Times.of({r: v[-n:] for r, v in self.step.items()},
                        {r: v[-n:] for r, v in self.wait.items()})


def aligned(states: Mapping[int, RankState | None], p: Params) -> Times | None:
    """The last n steps of every rank with ``min_steps`` of both series; None with under two
    ranks."""
    usable = {r: s for r, s in states.items() if s is not None
              and min(len(s.step_times), len(s.wait_times)) >= p.min_steps}
    if len(usable) < 2:
        return None
    n = min(p.window, *(min(len(s.step_times), len(s.wait_times)) for s in usable.values()))
    return Times.of({r: s.step_times[-n:] for r, s in usable.items()},
                    {r: s.wait_times[-n:] for r, s in usable.items()})


def steps_published(snapshot: Snapshot) -> int:
    """How many aligned steps the analysis would see (0 with fewer than two ranks)."""
    t = aligned(snapshot.states, Params(min_steps=1))
    return 0 if t is None else t.steps


def _median(values: Iterable[float]) -> float:
    got = list(values)
    return statistics.median(got) if got else 0.0


def medians_without_self(values: Sequence[float]) -> list[float]:
    """For each i, the median of ``values`` less ``values[i]`` (pure, one sort); needs two
    values."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranked = [values[i] for i in order]
    where = [0] * len(values)
    for k, i in enumerate(order):
        where[i] = k
    m = len(values) - 1

    def kept(j: int, gone: int) -> float:  # the j-th smallest once index ``gone`` is out
        return ranked[j] if j < gone else ranked[j + 1]

    if m % 2:
        return [kept(m // 2, where[i]) for i in range(len(values))]
    return [(kept(m // 2 - 1, where[i]) + kept(m // 2, where[i])) / 2
            for i in range(len(values))]


def cost_floor(ratio: float, step_s: float) -> float:
    """The fewest extra seconds a step must cost to be named (:data:`MIN_WAIT_S`,
    :data:`MIN_SHARE`)."""
    return max(MIN_WAIT_S, (ratio - 1) * MIN_SHARE * step_s)


def exceeds(value: float, base: float, ratio: float, floor: float) -> bool:
    """``value`` is over ``ratio`` x ``base`` and more than ``floor`` above it: the one "slower"
    test."""
    return value > ratio * base and value - base > floor


def scores(snapshot: Snapshot, p: Params = Params()) -> dict[int, float]:
    """Each rank's median compute per step over the others' median (pure; 1.0 is even)."""
    t = aligned(snapshot.states, p)
    if t is None:
        return {}
    medians = [_median(t.comp[r]) for r in t.ranks]
    return {r: own / others for r, own, others
            in zip(t.ranks, medians, medians_without_self(medians), strict=True) if others > 0}


def slow_counts(t: Times, ratio: float) -> dict[int, int]:
    """Per rank, the steps in which its compute :func:`exceeds` the other ranks' median."""
    counts = dict.fromkeys(t.ranks, 0)
    for k in range(t.steps):
        column = [t.comp[r][k] for r in t.ranks]
        floor = cost_floor(ratio, _median(t.step[r][k] for r in t.ranks))
        for r, c, others in zip(t.ranks, column, medians_without_self(column), strict=True):
            if exceeds(c, others, ratio, floor):
                counts[r] += 1
    return counts


def detect(snapshot: Snapshot, *, ratio: float = RATIO, min_steps: int = MIN_STEPS,
           consistent: float = CONSISTENT, window: int = WINDOW) -> Diagnosis | None:
    """A consistently slow rank, link or network over the window; None when the ranks keep pace."""
    p = Params(ratio, min_steps, consistent, window)
    t = aligned(snapshot.states, p)
    if t is None:
        return None
    return (_slow_rank(snapshot, t, p) or _slow_link(snapshot, t, p)
            or _slow_network(snapshot, t, p))


def _slow_rank(snapshot: Snapshot, t: Times, p: Params) -> Diagnosis | None:
    """A slow rank over the window or its second half (lately slow, else it reads as the
    network)."""
    half = t.steps // 2
    return _slow_rank_in(snapshot, t, p) or (
        _slow_rank_in(snapshot, t.tail(half), p) if half >= p.min_steps else None)


def wants_probes(snapshot: Snapshot) -> bool:
    """Collectives slowed on most ranks, unexplained, and no link probed yet: probes name the
    pair."""
    found = None if snapshot.probes else detect(snapshot)
    return found is not None and not found.hosts


def recent_wait(snapshot: Snapshot) -> float:
    """The median rank's wait per step over the window's second half: reprobe once this doubled."""
    t = aligned(snapshot.states, Params())
    if t is None:
        return 0.0
    return _median(_halves(t.wait[r])[1] for r in t.ranks)


def _slow_rank_in(snapshot: Snapshot, t: Times, p: Params) -> Diagnosis | None:
    counts = slow_counts(t, p.ratio)
    slow = [r for r in t.ranks if counts[r] >= p.consistent * t.steps]
    if not slow:
        return None
    medians = {r: _median(t.comp[r]) for r in t.ranks}
    worst = max(slow, key=lambda r: medians[r])
    others = _median(medians[r] for r in t.ranks if r != worst)
    waits = {r: _median(t.wait[r]) for r in t.ranks}
    wait_others = _median(waits[r] for r in t.ranks if r != worst)
    times = f"{medians[worst] / others:.2f}x" if others > 0 else "far more than"
    states = snapshot.states
    return Diagnosis(
        kind=KIND,
        summary=f"{name(states, worst)} computes {times} the other ranks' time per step "
                f"({medians[worst]:.3f} s vs {others:.3f} s); every step waits for it",
        ranks=(worst,), hosts=(host(states, worst),),
        evidence=(
            f"compute (step - collective wait), median of the last {t.steps} steps: "
            + ", ".join(f"rank {r} {medians[r]:.3f} s" for r in t.ranks[:16]),
            f"rank {worst} was over {p.ratio:g}x the others' median in {counts[worst]} of "
            f"{t.steps} steps",
            f"rank {worst} waits {waits[worst]:.3f} s per step in collectives, the others "
            f"{wait_others:.3f} s: they wait for it",
        ),
        hint=f"on {host(states, worst)}: look for what else runs there (`top`, `nvidia-smi`), "
             f"thermal or power throttling, a slower GPU/CPU, or a slow data loader for that "
             f"rank (`ddpnet.phase(\"data\")` marks it)",
    )


def _slow_link(snapshot: Snapshot, t: Times, p: Params) -> Diagnosis | None:
    """Compute is even but exactly two ranks wait longer: the link between them."""
    waits = {r: _median(t.wait[r]) for r in t.ranks}
    overall = _median(waits.values())
    floor = cost_floor(p.ratio, _median(_median(t.step[r]) for r in t.ranks))
    high = [r for r in t.ranks if exceeds(waits[r], overall, p.ratio, floor)]
    if len(high) != 2 or len(t.ranks) < 4:
        return None
    a, b = high
    states = snapshot.states
    return Diagnosis(
        kind=KIND,
        summary=f"slow link: {name(states, a)} <-> {name(states, b)}: both wait "
                f"{waits[a]:.3f} / {waits[b]:.3f} s per step in collectives, the median rank "
                f"{overall:.3f} s",
        ranks=(a, b), hosts=hosts(states, (a, b)),
        evidence=("collective wait per step (median of the last "
                  f"{t.steps} steps): " + ", ".join(f"rank {r} {waits[r]:.3f} s"
                                                   for r in t.ranks[:16]),),
        hint=_link_hint(states, a, b),
    )


def _link_hint(states: Mapping[int, RankState | None], a: int, b: int) -> str:
    iface = field(states, a, "interface", "<iface>")
    peer = field(states, b, "address", "<peer address>")
    return (f"on {host(states, a)} and {host(states, b)}: `ethtool {iface}` (Speed), "
            f"`ip -s link show {iface}` (errors, drops); `ddpnet bench` or `iperf3 -c {peer}` "
            f"between them after the job")


def _halves(values: Sequence[float]) -> tuple[float, float]:
    half = len(values) // 2
    return _median(values[:half]), _median(values[half:])


def _slow_network(snapshot: Snapshot, t: Times, p: Params) -> Diagnosis | None:
    """Waits rose on most ranks past the cost floor while compute did not (by ratio and floor)."""
    if t.steps < 2 * p.min_steps:
        return None
    rose = []
    for r in t.ranks:
        (w0, w1), (c0, c1) = _halves(t.wait[r]), _halves(t.comp[r])
        floor = cost_floor(p.ratio, _halves(t.step[r])[1])
        if exceeds(w1, w0, p.ratio, floor) and not exceeds(c1, c0, p.ratio, floor):
            rose.append((r, w0, w1))
    if len(rose) * 2 <= len(t.ranks):
        return None
    before = _median(w0 for _, w0, _ in rose)
    after = _median(w1 for _, _, w1 in rose)
    evidence = (f"collective wait per step rose on {len(rose)} of {len(t.ranks)} ranks: median "
                f"{before:.3f} s -> {after:.3f} s over the last {t.steps} steps; compute "
                f"unchanged",)
    return _named_by_probes(snapshot, evidence, after / max(before, 1e-9)) or Diagnosis(
        kind=KIND,
        summary=f"slow network: collectives take {after / max(before, 1e-9):.1f}x longer "
                f"than {t.steps // 2} steps ago on most ranks, compute unchanged",
        ranks=tuple(r for r, _, _ in rose), evidence=evidence,
        hint="a link or NIC slowed down; the watchdog probes the links to name it "
             "(`ddpnet bench` between the nodes after the job measures them)",
    )


def _named_by_probes(snapshot: Snapshot, evidence: tuple[str, ...],
                     factor: float) -> Diagnosis | None:
    """The slow node or link from stream probes' rates, when the snapshot has them."""
    found = slow_where([q for q in snapshot.probes if q.what == STREAM])
    if found is None:
        return None
    states = snapshot.states
    first = found.streams[0]
    ranks: tuple[int, ...]
    if found.node is not None:  # the hint names the node and the peer of its first stream
        a = found.node
        b = first.dst_rank if first.src_rank == a else first.src_rank
        where, ranks = name(states, a), (a,)
    else:
        a, b = found.links[0]
        where, ranks = f"{name(states, a)} <-> {name(states, b)}", (a, b)
    worst = min(q.rate_gbps or 0.0 for q in found.streams)
    return Diagnosis(
        kind=KIND,
        summary=f"slow network: collectives take {factor:.1f}x longer; the probes name "
                f"{where} (down to {worst:.3g} Gb/s)",
        ranks=ranks, hosts=hosts(states, ranks),
        evidence=(*evidence, *(f"rank {q.src_rank} -> rank {q.dst_rank}: {q.detail}"
                               for q in found.streams[:6])),
        hint=_link_hint(states, a, b),
    )
