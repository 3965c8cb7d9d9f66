"""What serving the job's metrics costs (issue 41): step time with and without
``--metrics-port``, and the hub's work per scrape and per state.

Steps: ``ddpnet train --local 2`` (gloo, loopback, the watch on in every arm) without metrics
("off", run twice a round: "off_again" is the A/A control), with ``--metrics-port`` at its
defaults and nobody scraping ("served"), and with a scraper GETting /metrics every
``--scrape-every`` seconds ("scraped"; 1 s: 15x Prometheus's default rate). Each round runs
the four in a fresh random order; each arm's figure is its ratio to the same round's "off"
(paired, so load that hits a round hits all its arms), summarised as the median and the
10th-90th percentiles over the rounds. Serving adds measurable step time only where its
ratios sit outside the control's. (The train arms in results/ predate the first link probe
round 5 s after every rank published, issue 58: they had none; what a round puts on the link
is probe_share.py's.)

Hub: one render by ``watch.metrics.JobCollector`` over a view of N ranks whose histograms
hold steps, in CPU seconds (text and OpenMetrics, which Prometheus asks for). Since issue 58
the ranks send cumulative counts and the hub does no work per heartbeat for the metrics (it
folded each state's 50-step window before: ``fold_us`` of older results).
``--baseline ROOT`` measures another checkout's hub alternately
with this one (before/after a change, under the same load).

    .venv/bin/python benchmarks/metrics_overhead.py [--rounds N] [--steps N] [--hub-only]
        [--baseline ROOT] [--out FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: the tree measured (``--baseline`` points a child run at another)
sys.path.insert(0, os.environ.get("DDPNET_BENCH_SRC") or str(ROOT / "src"))
RESULTS = ROOT / "benchmarks" / "results"
MODELS = {"tiny": ["--width", "64", "--depth", "2"],
          "wide": ["--width", "1024", "--depth", "4"]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scraper(port: int, every: float, stop: threading.Event, count: list[int]) -> None:
    while not stop.wait(every):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                r.read()
            count[0] += 1
        except OSError:
            pass


def hub_cpu(directory: str, stop: threading.Event, seen: list[float]) -> None:
    """The CPU seconds (user + system) of the job's hub, the process whose command line
    holds this run's watch ``directory``: its last reading before it exits (it runs in a
    session of its own, so nothing here reaps it and RUSAGE_CHILDREN misses it)."""
    import psutil

    proc = None
    while not stop.is_set() or proc is not None:
        if proc is None:
            lines = ((p, " ".join(p.info["cmdline"] or ()))
                     for p in psutil.process_iter(["cmdline"]))
            proc = next((p for p, line in lines
                         if "ddpnet.watch.hub" in line and directory in line), None)
        if proc is not None:
            try:
                t = proc.cpu_times()
                seen[0] = t.user + t.system
            except psutil.Error:
                return
        time.sleep(0.1)


def train_step(model: list[str], metrics: bool, steps: int, every: float | None
               ) -> tuple[float, int, dict[str, float]]:
    """The run's mean step time, how many scrapes it served (``every`` None: none), and the
    CPU it cost over its steps: the launcher and its ranks (reaped: RUSAGE_CHILDREN; their
    start-up included, the same in every arm, so compare arms) and the hub.
    CPU seconds move far less with the machine's load than step time does: serving can only
    cost the ranks' steps through CPU the hub takes from them, which this reads directly."""
    import resource

    directory = tempfile.mkdtemp(prefix="metrics-bench-")
    env = {**os.environ, "DDPNET_WATCH_DIR": directory}
    argv = [sys.executable, "-m", "ddpnet", "train", "--local", "2", "--json", "--max-steps",
            str(steps), "--log-every", str(steps), *model]
    port = free_port()
    stop, count = threading.Event(), [0]
    if metrics:
        argv += ["--metrics-port", str(port)]
    if metrics and every is not None:
        threading.Thread(target=scraper, args=(port, every, stop, count), daemon=True).start()
    hub, done = [0.0], threading.Event()
    watcher = threading.Thread(target=hub_cpu, args=(directory, done, hub), daemon=True)
    watcher.start()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900,
                              check=True)
    finally:
        stop.set()
        done.set()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    watcher.join(90)  # the hub ends once every rank said goodbye (or lingers for a scrape)
    ranks = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    cpu = {"job_cpu_ms_per_step": 1e3 * ranks / steps,
           "hub_cpu_ms_per_step": 1e3 * hub[0] / steps}
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["step_time_s"]), count[0], cpu


ARMS = ("off", "off_again", "served", "scraped")


def spread(values: list[float]) -> dict[str, float]:
    """Median and the 10th/90th percentiles (the middle 80 % of the rounds)."""
    cuts = statistics.quantiles(values, n=10, method="inclusive") if len(values) > 1 else \
        [values[0]] * 9
    return {"median": statistics.median(values), "p10": cuts[0], "p90": cuts[-1]}


def overhead(rounds: int, steps: dict[str, int], every: float, seed: int) -> dict[str, Any]:
    """Each round runs the four arms in a fresh random order: "off" twice (the second,
    "off_again", is the A/A control: the ratio two identical runs show on this machine),
    "served" and "scraped". Each arm's figure is its ratio to that round's "off" (paired:
    load that hits a round hits all its arms); served adds measurable step time only if its
    ratios sit outside the control's."""
    import random

    rng = random.Random(seed)
    out: dict[str, Any] = {}
    for name, model in MODELS.items():
        runs: dict[str, list[float]] = {arm: [] for arm in ARMS}
        cpu: dict[str, dict[str, list[float]]] = {
            arm: {"job_cpu_ms_per_step": [], "hub_cpu_ms_per_step": []} for arm in ARMS}
        scrapes: list[int] = []
        for _ in range(rounds):
            order = list(ARMS)
            rng.shuffle(order)
            for arm in order:
                step, count, used = train_step(model, arm in ("served", "scraped"),
                                               steps[name], every if arm == "scraped" else None)
                runs[arm].append(step)
                for key, value in used.items():
                    cpu[arm][key].append(value)
                if arm == "scraped":
                    scrapes.append(count)
        ratios = {arm: [a / b for a, b in zip(runs[arm], runs["off"], strict=True)]
                  for arm in ARMS[1:]}
        out[name] = {"steps": steps[name], "step_s": runs, "scrapes_served": scrapes,
                     "ratio_to_off": {arm: spread(r) for arm, r in ratios.items()},
                     "ratios": ratios, "cpu": cpu,
                     "cpu_ms_per_step": {arm: {key: spread(v) for key, v in got.items()}
                                         for arm, got in cpu.items()}}
        print(f"{name} CPU over its steps (median ms a step: job incl. start-up, hub): "
              + ", ".join(
            f"{arm} {statistics.median(got['job_cpu_ms_per_step']):.2f}, "
            f"{statistics.median(got['hub_cpu_ms_per_step']):.3f}" for arm, got in cpu.items()),
            flush=True)
        line = ", ".join(f"{arm} {100 * (v['median'] - 1):+.1f} % "
                         f"[{100 * (v['p10'] - 1):+.1f}, {100 * (v['p90'] - 1):+.1f}]"
                         for arm, v in out[name]["ratio_to_off"].items())
        print(f"{name} (off {statistics.median(runs['off']) * 1e3:.2f} ms a step): {line} "
              f"(median ratio to the round's off, [p10, p90] over {rounds} rounds)", flush=True)
    return out


def hub_costs(ranks: tuple[int, ...] = (8, 128, 1024), repeats: int = 5) -> dict[str, Any]:
    """One render's CPU seconds (``time.process_time``: what the hub spends, whatever else
    the machine runs) in the text format and in OpenMetrics (what Prometheus asks for), and
    the samples (the series count of N ranks)."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.openmetrics.exposition import generate_latest as openmetrics

    from ddpnet.watch import metrics
    from ddpnet.watch.metrics import JobCollector, JobView
    from ddpnet.watch.state import RankState

    out: dict[str, Any] = {}
    for n in ranks:
        states = {r: RankState(rank=r, world_size=n, host=f"node{r // 8}", step=100,
                               phase="forward", phase_since=1.0, published=2.0,
                               step_times=tuple(0.1 + 1e-4 * k for k in range(50)),
                               wait_times=(0.02,) * 50,
                               step_counts=(0, 0, 0, 0, 0, 100), step_seconds=10.0,
                               wait_seconds=2.0) for r in range(n)}
        view = JobView("bench", n, 0.0, states, dict.fromkeys(states, 0.5), 10.0, "learned",
                       straggler_scores=dict.fromkeys(states, 1.0))
        registry = CollectorRegistry(auto_describe=False)
        history = getattr(metrics, "StepHistory", None)  # a --baseline before issue 58
        if history is None:
            registry.register(JobCollector(lambda v=view: v))
        else:
            kept = history()
            for state in states.values():
                kept.fold(state)
            registry.register(JobCollector(lambda v=view: v, kept))  # type: ignore[call-arg]
        text, om = [], []
        for _ in range(repeats):
            t0 = time.process_time()
            body = generate_latest(registry)
            text.append(time.process_time() - t0)
            t0 = time.process_time()
            openmetrics(registry)
            om.append(time.process_time() - t0)
        samples = sum(1 for line in body.decode().splitlines() if not line.startswith("#"))
        out[str(n)] = {"scrape_ms": 1e3 * statistics.median(text),
                       "scrape_openmetrics_ms": 1e3 * statistics.median(om),
                       "bytes": len(body), "samples": samples}
        print(f"{n} ranks: one render {out[str(n)]['scrape_ms']:.1f} ms CPU (OpenMetrics "
              f"{out[str(n)]['scrape_openmetrics_ms']:.1f} ms), {samples} samples, "
              f"{len(body)} bytes", flush=True)
    return out


def hub_compared(baseline: Path, rounds: int) -> dict[str, Any]:
    """:func:`hub_costs` of this tree and of ``baseline`` (another checkout's root, e.g. the
    commit before a change), alternately in fresh processes: the same load hits both."""
    runs: dict[str, list[dict[str, Any]]] = {"this": [], "baseline": []}
    for _ in range(rounds):
        for name, src in (("baseline", baseline / "src"), ("this", ROOT / "src")):
            env = {**os.environ, "DDPNET_BENCH_SRC": str(src)}
            proc = subprocess.run([sys.executable, __file__, "--hub-json"], env=env,
                                  capture_output=True, text=True, check=True, timeout=900)
            runs[name].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    out: dict[str, Any] = {}
    for name, got in runs.items():
        out[name] = {n: {key: statistics.median(r[n][key] for r in got)
                         for key in ("scrape_ms", "scrape_openmetrics_ms", "samples", "bytes")}
                     for n in got[0] if n != "fold_us"}
    for n in out["this"]:
        if n in out["baseline"]:
            print(f"{n} ranks: render {out['baseline'][n]['scrape_ms']:.1f} -> "
                  f"{out['this'][n]['scrape_ms']:.1f} ms CPU, OpenMetrics "
                  f"{out['baseline'][n]['scrape_openmetrics_ms']:.1f} -> "
                  f"{out['this'][n]['scrape_openmetrics_ms']:.1f} ms (baseline -> this, "
                  f"medians of {rounds} alternating rounds)", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--steps", type=int, default=300, help="the wide model's steps "
                        "(the tiny one runs 8x as many: a few seconds of steps each)")
    parser.add_argument("--scrape-every", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=41)
    parser.add_argument("--baseline", type=Path, help="another checkout's root: its hub "
                        "costs measured alternately with this tree's")
    parser.add_argument("--hub-only", action="store_true", help="no train arms (those of "
                        "--out, if any, are kept)")
    parser.add_argument("--hub-json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=RESULTS / "metrics_overhead.json")
    args = parser.parse_args()
    if args.hub_json:
        with contextlib.redirect_stdout(sys.stderr):
            costs = hub_costs()
        print(json.dumps(costs))
        return
    result: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "loadavg_before": os.getloadavg()},
        "rounds": args.rounds, "scrape_every_s": args.scrape_every,
        "hub": hub_compared(args.baseline, 3) if args.baseline else hub_costs()}
    if not args.hub_only:
        steps = {"tiny": 8 * args.steps, "wide": args.steps}
        result["train"] = overhead(args.rounds, steps, args.scrape_every, args.seed)
    elif args.out.exists():  # the hub re-measured: the file's train arms stay, marked as such
        before = json.loads(args.out.read_text())
        for key in ("rounds", "scrape_every_s", "train", "train_note"):
            if key in before:
                result[key] = before[key]
        if "train" in before and "train_note" not in before:
            result["train_note"] = (f"from an earlier run ({before.get('rounds')} rounds, "
                                    f"load {before['machine'].get('loadavg_before')} before); "
                                    "only the hub was measured again")
    result["machine"]["loadavg_after"] = os.getloadavg()
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
