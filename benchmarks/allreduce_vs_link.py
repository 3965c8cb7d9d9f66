"""all_reduce busbw against the link's single-stream rate, and the harness's own cost.

A 4-node lab (network namespaces) with links shaped to 1 Gbit/s. In one run on every node:
the link baseline (iperf3 -J, one stream per ring pair), ``ddpnet.bench.run`` all_reduce at
sizes >= 64 MiB, and a bare loop of ``dist.all_reduce`` over a tensor of the same size (no
barriers, no per-iteration timers) to price the harness.

Targets (issue #7): busbw >= 0.93 x iperf3; bench's time within 3% of the bare loop.
Then variants that may move gloo: GLOO_SOCKET_IFNAME=eth0,eth0 (two pairs of connections).

    sudo .venv/bin/python benchmarks/allreduce_vs_link.py [--quick] [--out FILE]

Writes benchmarks/results/allreduce_vs_link.json (root and namespaces needed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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
iters, warmup, baseline = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
h = ddpnet.init(backend="gloo", timeout=900)
out = {"rank": h.rank, "interface": h.interface,
       "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME")}
cfg = BenchConfig(collectives=("all_reduce",), min_bytes=sizes[0], max_bytes=sizes[-1],
                  factor=2, iters=iters, warmup=warmup, baseline=baseline, baseline_seconds=5)
res = run(cfg)
out["bench"] = res.to_dict()
bare = {}
n = dist.get_world_size()
for size in sizes:
    t = torch.ones(size // 4, dtype=torch.float32)
    for _ in range(warmup):
        dist.all_reduce(t)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t)
    elapsed = (time.perf_counter() - t0) / iters
    slow = torch.tensor([elapsed], dtype=torch.float64)
    dist.all_reduce(slow, op=dist.ReduceOp.MAX)
    per = float(slow.item())
    bare[str(size)] = {"time_us": per * 1e6,
                       "busbw_gbps": size * 8 / per / 1e9 * 2 * (n - 1) / n}
out["bare"] = bare
ddpnet.shutdown()
if h.rank == 0:
    print("RESULT " + json.dumps(out))
"""


def one_run(label: str, nodes: int, rate: str, sizes: list[int], iters: int, warmup: int,
            env: dict[str, str], prefix: str = "bnb") -> dict[str, Any]:
    from ddpnet.lab import Lab

    name = f"{prefix}{os.getpid() % 10000}"
    with Lab(name=name, nodes=nodes, rate=rate) as lab:
        results = lab.run(
            [sys.executable, "-c", NODE_SCRIPT, ",".join(map(str, sizes)), str(iters),
             str(warmup), "iperf3"],
            env=env, timeout=1500,
        )
    bad = [r for r in results if r.returncode != 0]
    if bad:
        raise SystemExit(f"{label}: node {bad[0].node} failed: {bad[0].stderr[-2000:]}")
    line = next(ln for r in results for ln in r.stdout.splitlines() if ln.startswith("RESULT "))
    data: dict[str, Any] = json.loads(line[len("RESULT "):])
    link = data["bench"]["link"]["gbps"]
    rows = [r for r in data["bench"]["rows"] if r["bytes"] >= 64 << 20]
    summary = []
    for row in rows:
        bare = data["bare"][str(row["bytes"])]
        summary.append({
            "bytes": row["bytes"],
            "bench_time_us": row["time_us"],
            "bench_busbw_gbps": row["busbw_gbps"],
            "bare_time_us": round(bare["time_us"], 1),
            "bare_busbw_gbps": round(bare["busbw_gbps"], 4),
            "busbw_over_link": round(row["busbw_gbps"] / link, 4),
            "harness_overhead": round(row["time_us"] / bare["time_us"] - 1, 4),
        })
    return {"label": label, "env": env, "link": data["bench"]["link"], "rows": summary,
            "interface": data["interface"], "gloo_socket_ifname": data["GLOO_SOCKET_IFNAME"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--iters", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="64 MiB only, fewer iterations")
    ap.add_argument("--variants", default="default,eth0x2",
                    help="comma list of: default, eth0x2 (GLOO_SOCKET_IFNAME=eth0,eth0)")
    ap.add_argument("--out", type=Path, default=RESULTS / "allreduce_vs_link.json")
    args = ap.parse_args()
    sizes = [64 << 20] if args.quick else [64 << 20, 128 << 20, 256 << 20]
    iters = 4 if args.quick else args.iters
    variants = {"default": {}, "eth0x2": {"GLOO_SOCKET_IFNAME": "eth0,eth0"}}
    runs = []
    for label in args.variants.split(","):
        started = time.time()
        run = one_run(label, args.nodes, args.rate, sizes, iters, args.warmup,
                      variants[label])
        run["wall_s"] = round(time.time() - started, 1)
        runs.append(run)
        print(json.dumps(run, indent=1), flush=True)
    import torch

    doc = {
        "benchmark": "allreduce_vs_link",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {"cpus": os.cpu_count(), "kernel": platform.release(),
                 "python": platform.python_version(), "torch": torch.__version__},
        "lab": {"nodes": args.nodes, "rate": args.rate, "ranks_per_node": 1},
        "iters": iters, "warmup": args.warmup,
        "targets": {"busbw_over_link": 0.93, "harness_overhead": 0.03},
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
