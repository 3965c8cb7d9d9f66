"""all_reduce busbw against the link's single-stream rate, and the harness's own cost.

A 4-node lab (network namespaces) with links shaped to 1 Gbit/s. In one run on every node:
the link baseline (iperf3 -J, one stream per ring pair), ``ddpnet.bench.run`` all_reduce at
sizes >= 64 MiB, and a bare loop of ``dist.all_reduce`` over a tensor of the same size (no
barriers, no per-iteration timers) to price the harness.

Sizes are measured in rounds, interleaving the three timings so that load on the (shared)
machine hits them alike; a third timing, a bare loop with a barrier before each all_reduce
(barrier time included), separates the harness's cost from the effect of starting every
iteration together. Targets (issue #7): busbw >= 0.93 x iperf3; bench's time within 3% of
the bare loop.
Then variants that may move gloo: GLOO_SOCKET_IFNAME=eth0,eth0 (two pairs of connections).

    sudo .venv/bin/python benchmarks/allreduce_vs_link.py [--quick] [--out FILE]

Writes benchmarks/results/allreduce_vs_link.json (root and namespaces needed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"

#: what runs on every node (one rank per node): bench rows, then a bare loop per size
NODE_SCRIPT = r"""
import json, os, sys, time
import torch, torch.distributed as dist
import ddpnet
from ddpnet.bench import BenchConfig, run

sizes = [int(s) for s in sys.argv[1].split(",")]
iters, warmup, baseline, rounds = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
h = ddpnet.init(backend="gloo", timeout=900)
n = dist.get_world_size()
factor = 2 * (n - 1) / n
out = {"rank": h.rank, "interface": h.interface,
       "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME"), "rounds": []}


def slowest(seconds):
    t = torch.tensor(seconds, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def median(xs):
    xs = sorted(xs)
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


link = None
for rnd in range(rounds):
    for size in sizes:
        # 1. the harness: ddpnet.bench.run (barrier, then a timed all_reduce, per iteration)
        cfg = BenchConfig(collectives=("all_reduce",), min_bytes=size, max_bytes=size,
                          iters=iters, warmup=warmup, baseline=baseline, baseline_seconds=5)
        res = run(cfg, link=link)
        link = res.link
        row = res.rows[0]
        t = torch.ones(size // 4, dtype=torch.float32)
        for _ in range(warmup):
            dist.all_reduce(t)
        # 2. bare: all_reduce back to back, one clock around the loop
        dist.barrier()
        c0 = time.process_time()
        t0 = time.perf_counter()
        stamps = []
        for _ in range(iters):
            dist.all_reduce(t)
            stamps.append(time.perf_counter())
        bare = slowest([(stamps[-1] - t0) / iters])[0]
        cpu = slowest([(time.process_time() - c0) / iters])[0]
        # each iteration's length on each rank (end to end, back to back), slowest rank
        each = slowest([b - a for a, b in zip([t0] + stamps[:-1], stamps)])
        # 3. bare with a barrier before each all_reduce, the barrier's time included
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.barrier()
            dist.all_reduce(t)
        synced = slowest([(time.perf_counter() - t0) / iters])[0]
        out["rounds"].append({
            "round": rnd, "bytes": size,
            "bench_time_us": row.time_us, "bench_min_us": row.min_us, "bench_max_us": row.max_us,
            "bench_busbw_gbps": row.busbw_gbps,
            "bare_time_us": bare * 1e6, "bare_busbw_gbps": size * 8 / bare / 1e9 * factor,
            "bare_cpu_s_per_op": cpu,
            "bare_iter_us": [round(x * 1e6) for x in each],
            "bare_barrier_time_us": synced * 1e6,
            "bare_barrier_busbw_gbps": size * 8 / synced / 1e9 * factor,
        })
out["link"] = link.to_dict()
ddpnet.shutdown()
if h.rank == 0:
    print("RESULT " + json.dumps(out))
"""


def summarize(rounds: list[dict[str, Any]], sizes: list[int], link: float) -> list[dict[str, Any]]:
    """Per size, medians over rounds. The bench's headline is the median iteration; the bare
    loop's is a mean (one clock around the loop), so its median iteration is given too: the
    two differ by the outlier iterations a loaded host produces."""
    summary = []
    for size in sizes:
        rounds_ = [r for r in rounds if r["bytes"] == size]
        bench = statistics.median(r["bench_time_us"] for r in rounds_)
        bare = statistics.median(r["bare_time_us"] for r in rounds_)
        synced = statistics.median(r["bare_barrier_time_us"] for r in rounds_)
        busbw = statistics.median(r["bench_busbw_gbps"] for r in rounds_)
        row: dict[str, Any] = {
            "bytes": size,
            "bench_time_us": round(bench, 1),
            "bench_busbw_gbps": round(busbw, 4),
            "bare_time_us": round(bare, 1),
            "bare_busbw_gbps": round(statistics.median(r["bare_busbw_gbps"] for r in rounds_), 4),
            "bare_barrier_time_us": round(synced, 1),
            # CPU seconds one rank's process spends per all_reduce (all lab nodes share the
            # host's cores)
            "cpu_s_per_all_reduce": round(statistics.median(r["bare_cpu_s_per_op"]
                                                             for r in rounds_), 3),
            "busbw_over_link": round(busbw / link, 4),
            # >0: bench reports a longer time than the bare loop takes per all_reduce
            "harness_overhead_vs_bare": round(bench / bare - 1, 4),
            "harness_overhead_vs_bare_barrier": round(bench / synced - 1, 4),
        }
        if all("bare_iter_us" in r for r in rounds_):
            per_iter = statistics.median(statistics.median(r["bare_iter_us"]) for r in rounds_)
            row["bare_iter_median_us"] = round(per_iter, 1)
            row["harness_overhead_vs_bare_median_iter"] = round(bench / per_iter - 1, 4)
        summary.append(row)
    return summary


def one_run(label: str, nodes: int, rate: str, sizes: list[int], iters: int, warmup: int,
            rounds: int, env: dict[str, str], prefix: str = "bnb") -> dict[str, Any]:
    from ddpnet.lab import Lab

    name = f"{prefix}{os.getpid() % 10000}"
    with Lab(name=name, nodes=nodes, rate=rate) as lab:
        results = lab.run(
            [sys.executable, "-c", NODE_SCRIPT, ",".join(map(str, sizes)), str(iters),
             str(warmup), "iperf3", str(rounds)],
            env=env, timeout=3000,
        )
    bad = [r for r in results if r.returncode != 0]
    if bad:
        raise SystemExit(f"{label}: node {bad[0].node} failed: {bad[0].stderr[-2000:]}")
    line = next(ln for r in results for ln in r.stdout.splitlines() if ln.startswith("RESULT "))
    data: dict[str, Any] = json.loads(line[len("RESULT "):])
    summary = summarize(data["rounds"], sizes, data["link"]["gbps"])
    return {"label": label, "env": env, "link": data["link"], "summary": summary,
            "rounds": data["rounds"], "interface": data["interface"],
            "gloo_socket_ifname": data["GLOO_SOCKET_IFNAME"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--iters", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2,
                    help="bench, bare and bare+barrier interleaved this many times per size")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="64 MiB only, fewer iterations")
    ap.add_argument("--variants", default="default,eth0x2",
                    help="comma list of: default, eth0x2 (GLOO_SOCKET_IFNAME=eth0,eth0)")
    ap.add_argument("--out", type=Path, default=RESULTS / "allreduce_vs_link.json")
    args = ap.parse_args()
    sizes = [64 << 20] if args.quick else [64 << 20, 256 << 20]
    iters = 3 if args.quick else args.iters
    rounds = 1 if args.quick else args.rounds
    variants = {"default": {}, "eth0x2": {"GLOO_SOCKET_IFNAME": "eth0,eth0"}}
    runs = []
    for label in args.variants.split(","):
        started = time.time()
        run = one_run(label, args.nodes, args.rate, sizes, iters, args.warmup, rounds,
                      variants[label])
        run["wall_s"] = round(time.time() - started, 1)
        runs.append(run)
        print(json.dumps({k: run[k] for k in ("label", "summary", "wall_s")}, indent=1),
              flush=True)
    import torch

    doc = {
        "benchmark": "allreduce_vs_link",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {"cpus": os.cpu_count(), "loadavg_at_end": os.getloadavg(),
                 "kernel": platform.release(),
                 "python": platform.python_version(), "torch": torch.__version__},
        "lab": {"nodes": args.nodes, "rate": args.rate, "ranks_per_node": 1},
        "iters": iters, "warmup": args.warmup, "rounds": rounds,
        "targets": {"busbw_over_link": 0.93, "harness_overhead": 0.03},
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
