"""The job's metrics in Prometheus's exposition format, from the watch's hub (issue 41).

:class:`JobCollector` is a ``prometheus_client`` collector: each scrape asks the hub for a
:class:`JobView` (a copy of what it already holds: every rank's last ``RankState``, the
learned threshold, the warnings and verdicts, the last link probes) and renders it then,
never per heartbeat. The one thing kept between scrapes is :class:`StepHistory`, each rank's
step histogram and collective-wait sum and count, which the hub feeds with the steps new in a
state (a bisect per step, and only with metrics on): a scrape every 15 s sees every step, where
the published window holds only the last ``straggler.WINDOW``.

A scrape's cost is its samples' (``prometheus_client`` formats each for ~10 us), nearly all
of them per rank: so a rank's step histogram has 14 buckets (it had 18) and its collective
wait is a summary (``_sum`` and ``_count``: the mean wait per step, what the dashboard graphs)
rather than a second histogram: 23 samples a rank instead of 45, half the render
(benchmarks/metrics_overhead.py).

Names follow Prometheus's rules (base units, ``_seconds``, ``_bytes``, ``_total`` for
counters) and labels the ones DCGM's exporter and node_exporter use (``job_id``, ``rank``,
``host``, ``peer_host``, ``kind``), so a query joins them by host. Nothing secret is served:
no job token, no environment, no addresses beyond host names.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ddpnet.watch.state import Diagnosis, LinkProbe, RankState

PREFIX = "ddpnet"
#: upper bounds (seconds) of the step histogram's buckets: 5 ms (a tiny model's step) to 2
#: minutes (beyond: a stall, which the watch names), about 2.5x apart
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0)


@dataclass
class Histogram:
    """One series' bucket counts (not cumulative), sum and count."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))
    total: float = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(BUCKETS, value)] += 1
        self.total += value

    def cumulative(self) -> list[tuple[str, float]]:
        out, running = [], 0
        for bound, count in zip((*map(str, BUCKETS), "+Inf"), self.counts, strict=True):
            running += count
            out.append((bound, float(running)))
        return out


def new_steps(before: Sequence[tuple[float, float]],
              after: Sequence[tuple[float, float]]) -> Sequence[tuple[float, float]]:
    """The (step, wait) pairs of ``after`` that ``before`` did not hold (pure): both are one
    rank's sliding window, so the new ones follow the longest tail of ``before`` that
    ``after`` begins with; none in common (a restart, or more steps than the window between
    two states) is all of ``after``."""
    if not before or not after:
        return after
    for start in range(len(before)):
        if before[start] == after[0]:
            tail = before[start:]
            if tuple(after[:len(tail)]) == tuple(tail):
                return after[len(tail):]
    return after


class StepHistory:
    """Each rank's step-seconds histogram and collective-wait total, fed from its states (the
    hub's thread) and read by scrapes (the server's): one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last: dict[int, tuple[tuple[float, float], ...]] = {}
        self.steps: dict[int, Histogram] = {}
        self.waits: dict[int, float] = {}

    def fold(self, state: RankState) -> None:
        window = tuple(zip(state.step_times, state.wait_times, strict=False))
        with self.lock:
            fresh = new_steps(self.last.get(state.rank, ()), window)
            self.last[state.rank] = window
            step = self.steps.setdefault(state.rank, Histogram())
            waited = self.waits.get(state.rank, 0.0)
            for seconds, wait in fresh:
                step.observe(seconds)
                waited += wait
            self.waits[state.rank] = waited

    def copy(self) -> dict[int, tuple[list[tuple[str, float]], float, float]]:
        """Per rank, as of now: (step buckets, step sum, wait sum); steps and waits are
        counted alike (a wait per step)."""
        with self.lock:
            return {r: (h.cumulative(), h.total, self.waits[r]) for r, h in self.steps.items()}


@dataclass(frozen=True)
class Probed:
    """A rank pair's last link probe (a stream's: rate and RTT) and when it came (wall)."""

    probe: LinkProbe
    at: float


@dataclass(frozen=True)
class JobView:
    """What one scrape renders: the hub's state at that moment."""

    job_id: str
    world_size: int
    started: float
    states: Mapping[int, RankState]
    #: seconds since the hub last heard each rank (its own clock)
    heard_ago: Mapping[int, float]
    threshold_s: float
    threshold_source: str
    warnings: tuple[str, ...] = ()
    verdicts: tuple[str, ...] = ()
    #: the verdict whose stall still stands (no progress since), None when none
    standing: Diagnosis | None = None
    probes: Mapping[tuple[int, int], Probed] = field(default_factory=dict)
    straggler_scores: Mapping[int, float] = field(default_factory=dict)
    version: str = ""


def last_progress(state: RankState) -> float:
    """When this rank last moved, by its own clock: a phase mark, a collective started or
    ended (pure)."""
    times = [state.phase_since, state.long_since]
    for record in state.recent:
        times.append(record.ended if record.ended is not None else record.started)
    return max(times)


def since_progress(state: RankState, heard_ago: float) -> float:
    """Seconds since ``state``'s rank last moved as of now (pure): measured on its own clock
    up to its last heartbeat, plus how long ago the hub heard that (clocks may differ)."""
    moved = last_progress(state)
    behind = state.published - moved if moved > 0 else 0.0
    return max(0.0, behind) + max(0.0, heard_ago)


def host_pairs(view: JobView) -> dict[tuple[str, str], list[Probed]]:
    """Every stream probe with a rate, by (host, peer host) of its ends (pure)."""
    pairs: dict[tuple[str, str], list[Probed]] = {}
    for (src, dst), probed in sorted(view.probes.items()):
        a, b = view.states.get(src), view.states.get(dst)
        if a is None or b is None or not a.host or not b.host or a.host == b.host:
            continue
        pairs.setdefault((a.host, b.host), []).append(probed)
    return pairs


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


class JobCollector:
    """A ``prometheus_client`` custom collector over the hub's :class:`JobView`."""

    def __init__(self, view: Callable[[], JobView], history: StepHistory) -> None:
        self.view = view
        self.history = history

    def collect(self) -> Iterator[Any]:
        view = self.view()
        yield from self.identity(view)
        yield from self.histograms(view)
        yield from self.ranks(view)
        yield from self.threshold(view)
        yield from self.counted(view)
        yield from self.links(view)

    def rank_labels(self, view: JobView, rank: int) -> list[str]:
        state = view.states.get(rank)
        return [view.job_id, str(rank), state.host if state is not None else ""]

    def identity(self, view: JobView) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily

        info = InfoMetricFamily(f"{PREFIX}_job", "The job: its id, world size and ddpnet "
                                "version (always 1)")
        master = view.states.get(0)
        info.add_metric([], {"job_id": view.job_id, "world_size": str(view.world_size),
                             "master_host": master.host if master else "",
                             "version": view.version})
        yield info
        start = GaugeMetricFamily(f"{PREFIX}_job_start_time_seconds",
                                  "When the job's watch hub started (Unix time)",
                                  labels=["job_id"])
        start.add_metric([view.job_id], view.started)
        yield start
        ranks = GaugeMetricFamily(f"{PREFIX}_ranks_reporting",
                                  "Ranks whose heartbeat the hub holds", labels=["job_id"])
        ranks.add_metric([view.job_id], float(len(view.states)))
        yield ranks

    def histograms(self, view: JobView) -> Iterator[Any]:
        from prometheus_client.core import HistogramMetricFamily, SummaryMetricFamily

        history = self.history.copy()
        labels = ["job_id", "rank", "host"]
        step = HistogramMetricFamily(f"{PREFIX}_step_seconds", "Wall seconds per training step, "
                                     "per rank", labels=labels)
        wait = SummaryMetricFamily(f"{PREFIX}_collective_wait_seconds", "Seconds per step "
                                   "spent inside collectives, per rank (sum and count of "
                                   "steps)", labels=labels)
        for rank, (buckets, step_sum, wait_sum) in sorted(history.items()):
            names = self.rank_labels(view, rank)
            step.add_metric(names, buckets, step_sum)
            wait.add_metric(names, int(buckets[-1][1]), wait_sum)
        yield step
        yield wait

    def ranks(self, view: JobView) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        labels = ["job_id", "rank", "host"]
        done = CounterMetricFamily(f"{PREFIX}_steps", "Training steps begun, per rank",
                                   labels=labels)
        phase = GaugeMetricFamily(f"{PREFIX}_rank_phase", "The phase each rank is in (1; "
                                  "phase=\"\" when unmarked)", labels=[*labels, "phase"])
        still = GaugeMetricFamily(f"{PREFIX}_rank_seconds_since_progress", "Seconds since "
                                  "the rank's last progress (a phase, a collective)",
                                  labels=labels)
        heard = GaugeMetricFamily(f"{PREFIX}_rank_heartbeat_age_seconds", "Seconds since the "
                                  "hub last heard the rank", labels=labels)
        score = GaugeMetricFamily(f"{PREFIX}_straggler_score", "The rank's compute per step "
                                  "over the other ranks' median (1: even; the watch warns "
                                  "above 1.25)", labels=labels)
        for rank, state in sorted(view.states.items()):
            names = self.rank_labels(view, rank)
            ago = view.heard_ago.get(rank, 0.0)
            done.add_metric(names, float(max(0, state.step)))
            phase.add_metric([*names, state.phase], 1.0)
            still.add_metric(names, since_progress(state, ago))
            heard.add_metric(names, max(0.0, ago))
            if rank in view.straggler_scores:
                score.add_metric(names, view.straggler_scores[rank])
        yield from (done, phase, still, heard, score)

    def threshold(self, view: JobView) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        gauge = GaugeMetricFamily(f"{PREFIX}_hang_threshold_seconds", "Seconds without "
                                  "progress before the watch names a hang (learned, or "
                                  "watch_timeout)", labels=["job_id", "source"])
        gauge.add_metric([view.job_id, view.threshold_source], view.threshold_s)
        yield gauge

    def counted(self, view: JobView) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        for name, kinds, text in (("verdicts", view.verdicts, "Verdicts the watch gave"),
                                  ("warnings", view.warnings, "Warnings the watch gave")):
            family = CounterMetricFamily(f"{PREFIX}_{name}", f"{text}, by kind",
                                         labels=["job_id", "kind"])
            for kind in sorted(set(kinds)):
                family.add_metric([view.job_id, kind], float(kinds.count(kind)))
            yield family
        standing = GaugeMetricFamily(f"{PREFIX}_verdict", "1 for each rank the standing "
                                     "verdict names (until the job progresses again)",
                                     labels=["job_id", "rank", "host", "kind"])
        found = view.standing
        if found is not None:
            for rank in found.ranks:
                standing.add_metric([*self.rank_labels(view, rank), found.kind], 1.0)
        yield standing

    def links(self, view: JobView) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        labels = ["job_id", "host", "peer_host"]
        rate = GaugeMetricFamily(f"{PREFIX}_probe_bandwidth_bytes_per_second", "The watch's "
                                 "last stream probe from host to peer_host (mean over its "
                                 "rank pairs)", labels=labels)
        rtt = GaugeMetricFamily(f"{PREFIX}_probe_rtt_seconds", "The kernel's smoothed round "
                                "trip of the last stream probe from host to peer_host",
                                labels=labels)
        up = GaugeMetricFamily(f"{PREFIX}_probe_reachable", "Whether the last stream probe "
                               "from host to peer_host got through (1) or not (0)",
                               labels=labels)
        when = GaugeMetricFamily(f"{PREFIX}_probe_timestamp_seconds", "When host last probed "
                                 "peer_host (Unix time)", labels=labels)
        for (host, peer), probed in host_pairs(view).items():
            names = [view.job_id, host, peer]
            rates = [p.probe.rate_gbps * 1e9 / 8 for p in probed
                     if p.probe.reachable and p.probe.rate_gbps is not None]
            rtts = [p.probe.rtt_s for p in probed
                    if p.probe.reachable and p.probe.rtt_s is not None]
            if rates:
                rate.add_metric(names, _mean(rates))
            if rtts:
                rtt.add_metric(names, _mean(rtts))
            up.add_metric(names, float(all(p.probe.reachable for p in probed)))
            when.add_metric(names, max(p.at for p in probed))
        yield from (rate, rtt, up, when)
