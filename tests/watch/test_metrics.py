"""The job's metrics as a scrape renders them (watch.metrics): real prometheus_client, real
exposition text, checked by Prometheus's own promtool when it is installed."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ddpnet.watch.metrics import (
    JobCollector,
    JobView,
    Probed,
    cumulative,
    since_progress,
)
from ddpnet.watch.state import (
    PHASES,
    STEP_BUCKETS,
    CollectiveRecord,
    Diagnosis,
    LinkProbe,
    RankState,
)

SECRET = "10.9.8.7:29500:3"  # what a job token looks like: never served


def states() -> dict[int, RankState]:
    return {r: RankState(rank=r, world_size=3, host=f"node{r}", address=f"10.9.8.{r}",
                         step=12, phase="forward", phase_since=100.0, published=103.0,
                         step_times=(0.2, 0.21, 0.2 + 0.3 * (r == 2)),
                         wait_times=(0.05, 0.06, 0.05),
                         step_counts=(0, 0, 0, 0, 0, 12), step_seconds=2.4 + r,
                         wait_seconds=0.6,
                         recent=(CollectiveRecord(5, "all_reduce", started=101.0, ended=102.0),),
                         extra={"token": SECRET})
            for r in range(3)}


def probe(a: int, b: int, gbps: float | None, rtt: float | None = 0.0002,
          ok: bool = True) -> Probed:
    return Probed(LinkProbe(a, b, ok, "", rate_gbps=gbps, what="stream", rtt_s=rtt), 500.0)


def view(**changes: object) -> JobView:
    base = dict(job_id="job-7", world_size=3, started=50.0, states=states(),
                heard_ago={0: 0.5, 1: 0.5, 2: 4.0}, threshold_s=12.0,
                threshold_source="learned", warnings=("straggler", "straggler", "working"),
                verdicts=("rank-not-arriving",),
                standing=Diagnosis("rank-not-arriving", "rank 2 late", ranks=(2,)),
                probes={(0, 1): probe(0, 1, 8.0), (0, 2): probe(0, 2, 4.0),
                        (2, 0): probe(2, 0, None, None, ok=False)},
                straggler_scores={0: 1.0, 1: 0.98, 2: 1.6}, version="0.1.0")
    base.update(changes)
    return JobView(**base)  # type: ignore[arg-type]


def scrape(v: JobView) -> str:
    """One scrape of ``v``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JobCollector(lambda: v))
    return generate_latest(registry).decode()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def find(text: str, name: str, **labels: str) -> float:
    got = [v for (n, ls), v in samples(text).items()
           if n == name and all((k, val) in ls for k, val in labels.items())]
    assert len(got) == 1, (name, labels, got)
    return got[0]


def test_cumulative_buckets_end_with_inf_and_pad_a_short_count() -> None:
    assert cumulative((1, 0, 2)) == [(str(b), float(1 + 2 * (i >= 2)))
                                     for i, b in enumerate(STEP_BUCKETS)] + [("+Inf", 3.0)]
    assert cumulative(()) == [(str(b), 0.0) for b in (*STEP_BUCKETS, "+Inf")]


def test_the_ranks_own_counts_are_served_as_they_are() -> None:
    """The hub keeps nothing between scrapes: two scrapes of one state say the same, and a
    state whose 50-step window slid by 300 steps counts all of them (it once lost 250)."""
    counts = [0] * (len(STEP_BUCKETS) + 1)
    counts[4], counts[-1] = 300, 1  # 300 steps of 0.05 s or less, one above 120 s
    s = RankState(rank=1, world_size=2, host="n1", step_times=(0.05,) * 50,
                  wait_times=(0.01,) * 50, step_counts=tuple(counts), step_seconds=150.5,
                  wait_seconds=3.25)
    text = scrape(view(states={1: s}))
    assert text == scrape(view(states={1: s}))
    assert find(text, "ddpnet_step_seconds_count", rank="1", host="n1") == 301
    assert find(text, "ddpnet_steps_total", rank="1", host="n1") == 301
    assert find(text, "ddpnet_step_seconds_sum", rank="1") == 150.5
    assert find(text, "ddpnet_step_seconds_bucket", rank="1", le="0.025") == 0
    assert find(text, "ddpnet_step_seconds_bucket", rank="1", le="0.1") == 300
    assert find(text, "ddpnet_step_seconds_bucket", rank="1", le="120.0") == 300
    assert find(text, "ddpnet_collective_wait_seconds_sum", rank="1") == 3.25
    assert find(text, "ddpnet_collective_wait_seconds_count", rank="1") == 301


def test_every_rank_has_one_phase_series_per_phase_whatever_its_phase() -> None:
    before = scrape(view())
    moved = {r: RankState(**{**s.__dict__, "phase": "backward" if r else ""})
             for r, s in states().items()}
    after = scrape(view(states=moved))
    series = [{k for k in samples(t) if k[0] == "ddpnet_rank_phase"} for t in (before, after)]
    assert series[0] == series[1] and len(series[0]) == 3 * len(PHASES)
    assert find(after, "ddpnet_rank_phase", rank="1", phase="backward") == 1
    assert find(after, "ddpnet_rank_phase", rank="1", phase="forward") == 0
    assert find(after, "ddpnet_rank_phase", rank="0", phase="unmarked") == 1
    assert sum(v for (n, ls), v in samples(after).items()
               if n == "ddpnet_rank_phase" and ("rank", "2") in ls) == 1


def test_a_scrape_names_every_rank_its_phase_stall_score_and_the_verdict() -> None:
    text = scrape(view())
    assert find(text, "ddpnet_job_info", job_id="job-7", world_size="3") == 1
    assert find(text, "ddpnet_steps_total", rank="2", host="node2") == 12
    assert find(text, "ddpnet_rank_phase", rank="0", phase="forward") == 1
    # rank 2 last moved at 102 (its collective ended), published at 103, heard 4 s ago
    assert find(text, "ddpnet_rank_seconds_since_progress", rank="2") == pytest.approx(5.0)
    assert find(text, "ddpnet_rank_heartbeat_age_seconds", rank="2") == 4.0
    assert find(text, "ddpnet_straggler_score", rank="2", host="node2") == 1.6
    assert find(text, "ddpnet_hang_threshold_seconds", source="learned") == 12.0
    assert find(text, "ddpnet_warnings_total", kind="straggler") == 2
    assert find(text, "ddpnet_verdicts_total", kind="rank-not-arriving") == 1
    assert find(text, "ddpnet_verdict", rank="2", host="node2", kind="rank-not-arriving") == 1
    assert not any(n == "ddpnet_verdict" for n, _ in samples(scrape(view(standing=None))))


def test_probes_are_served_per_host_pair_in_bytes_and_seconds() -> None:
    text = scrape(view())
    assert find(text, "ddpnet_probe_bandwidth_bytes_per_second", host="node0",
                peer_host="node1") == 1e9
    assert find(text, "ddpnet_probe_rtt_seconds", host="node0", peer_host="node2") == 0.0002
    assert find(text, "ddpnet_probe_reachable", host="node2", peer_host="node0") == 0
    assert find(text, "ddpnet_probe_timestamp_seconds", host="node0", peer_host="node1") == 500
    # no rate measured: no bandwidth sample (not a zero that reads as a dead link)
    assert not [k for k in samples(text) if k[0] == "ddpnet_probe_bandwidth_bytes_per_second"
                and ("host", "node2") in k[1]]


def test_since_progress_adds_the_time_since_the_hub_heard_it() -> None:
    s = RankState(rank=0, world_size=2, phase_since=10.0, published=15.0)
    assert since_progress(s, 2.0) == 7.0
    assert since_progress(RankState(rank=0, world_size=2), 3.0) == 3.0  # nothing yet


def test_nothing_secret_is_served() -> None:
    text = scrape(view())
    assert SECRET not in text and "10.9.8" not in text and "token" not in text


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian's prometheus)")
def test_promtool_finds_nothing_to_say_about_a_scrape() -> None:
    out = subprocess.run(["promtool", "check", "metrics"], input=scrape(view()), text=True,
                         capture_output=True, timeout=60)
    assert out.returncode == 0 and not (out.stdout + out.stderr).strip(), out
