"""The job's metrics in Prometheus's exposition format, from the hub (docs/watch.md, "Prometheus
metrics"). :class:`JobCollector` renders a :class:`JobView` (a copy of the hub's state) at each
scrape, never per heartbeat."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ddpnet.watch.progress import moved_at
from ddpnet.watch.state import PHASES, STEP_BUCKETS, Diagnosis, LinkProbe, RankState

PREFIX = "ddpnet"
#: the phase label of a rank that marks none (Prometheus reads an empty label as none at all)
UNMARKED = "unmarked"


def cumulative(counts: Sequence[int]) -> list[tuple[str, float]]:
    """A rank's step counts per bucket as the histogram's cumulative ``le`` buckets, ``+Inf``
    last."""
    padded = [*counts, *[0] * (len(STEP_BUCKETS) + 1 - len(counts))]
    out, running = [], 0
    for bound, count in zip((*map(str, STEP_BUCKETS), "+Inf"), padded, strict=False):
        running += count
        out.append((bound, float(running)))
    return out


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


def since_progress(state: RankState, heard_ago: float) -> float:
    """Seconds since ``state``'s rank last moved (pure): its clock to its last heartbeat, then the
    hub's."""
    moved = moved_at(state)
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


class JobCollector:
    """A ``prometheus_client`` custom collector over the hub's :class:`JobView`."""

    def __init__(self, view: Callable[[], JobView]) -> None:
        self.view = view

    def collect(self) -> Iterator[Any]:
        view = self.view()
        yield from self.identity(view)
        yield from self.ranks(view)
        yield from self.judged(view)
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

    def ranks(self, view: JobView) -> Iterator[Any]:
        """Every rank's series, one pass over the ranks."""
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
            SummaryMetricFamily,
        )

        labels = ["job_id", "rank", "host"]
        step = HistogramMetricFamily(f"{PREFIX}_step_seconds", "Wall seconds per training step, "
                                     "per rank (every step since the rank started)",
                                     labels=labels)
        wait = SummaryMetricFamily(f"{PREFIX}_collective_wait_seconds", "Seconds per step "
                                   "spent inside collectives, per rank (sum and count of "
                                   "steps)", labels=labels)
        done = CounterMetricFamily(f"{PREFIX}_steps", "Training steps finished, per rank (the "
                                   "step histogram's count)", labels=labels)
        phase = GaugeMetricFamily(f"{PREFIX}_rank_phase", "1 for the phase each rank is in, 0 "
                                  f"for the others (one series per phase; {UNMARKED}: none "
                                  "marked)", labels=[*labels, "phase"])
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
            step.add_metric(names, cumulative(state.step_counts), state.step_seconds)
            wait.add_metric(names, state.steps_done, state.wait_seconds)
            done.add_metric(names, float(state.steps_done))
            for name in PHASES:
                phase.add_metric([*names, name or UNMARKED], float(name == state.phase))
            still.add_metric(names, since_progress(state, ago))
            heard.add_metric(names, max(0.0, ago))
            if rank in view.straggler_scores:
                score.add_metric(names, view.straggler_scores[rank])
        yield from (step, wait, done, phase, still, heard, score)

    def judged(self, view: JobView) -> Iterator[Any]:
        """The threshold, the verdicts and warnings given, and the standing verdict."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        gauge = GaugeMetricFamily(f"{PREFIX}_hang_threshold_seconds", "Seconds without "
                                  "progress before the watch names a hang (learned, or "
                                  "watch_timeout)", labels=["job_id", "source"])
        gauge.add_metric([view.job_id, view.threshold_source], view.threshold_s)
        yield gauge
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
                                 "rank pairs): its share of the link while every peer "
                                 "streams too, not the link's rate", labels=labels)
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
                rate.add_metric(names, sum(rates) / len(rates))
            if rtts:
                rtt.add_metric(names, sum(rtts) / len(rtts))
            up.add_metric(names, float(all(p.probe.reachable for p in probed)))
            when.add_metric(names, max(p.at for p in probed))
        yield from (rate, rtt, up, when)
