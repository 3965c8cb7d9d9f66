"""Comm hooks on a slow network: ``ddpnet train`` on a 4-node lab with 1 Gbit/s links.

Comm-bound case: an MLP of ~25M parameters (width 5000, depth 2) at a small per-rank batch,
so each step all-reduces 100 MB of fp32 gradients over 1 Gbit/s links. Targets (issue #10):
samples/s with ``--comm-hook bf16`` >= 1.7x ``none``, ``powersgd`` (rank 4) >= 3x ``none``,
and eval loss after the same number of steps within 5% of ``none``.

Compute-bound case: a small model (width 256, 150K parameters) at a large batch (8192 per
rank), where the all-reduce is a few percent of the step and compression can only add work;
target: every hook within 5% of ``none`` in samples/s.

``ddpnet train`` times steps from the third on (the first two build and rebuild DDP's buckets;
PowerSGD's from the first compressed one) and runs with THP_MEM_ALLOC_ENABLE=1, its default.

Each node is a network namespace with one rank (``ddpnet.lab``); runs of a case alternate
between hooks and repeat (``--repeats``), and the median samples/s is compared, because the
machine is shared. Needs root. Writes one JSON to ``--out``.

    sudo .venv/bin/python benchmarks/train_comm_hooks.py --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from typing import Any

from ddpnet.lab import Lab

HOOKS = ("none", "bf16", "fp16", "powersgd")


def run_case(lab: Lab, args: list[str], hook: str, port: int, timeout: float) -> dict[str, Any]:
    argv = [sys.executable, "-m", "ddpnet", "train", *args, "--comm-hook", hook, "--json"]
    if hook == "powersgd":
        argv += ["--powersgd-rank", "4"]
    results = lab.run(argv, env={"OMP_NUM_THREADS": "1"}, timeout=timeout, master_port=port)
    for r in results:
        if r.returncode != 0:
            raise SystemExit(f"node {r.node} failed ({r.returncode}) for hook {hook}:\n"
                             f"{r.stderr[-3000:]}")
    summary: dict[str, Any] = json.loads(results[0].stdout)
    return summary


def bench(lab: Lab, name: str, args: list[str], hooks: tuple[str, ...], repeats: int,
          timeout: float, port: list[int]) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {h: [] for h in hooks}
    for rep in range(repeats):
        for hook in hooks:
            port[0] += 1
            t0 = time.monotonic()
            s = run_case(lab, args, hook, port[0], timeout)
            print(f"[{name} #{rep}] {hook:8s} {s['samples_per_s']:9.1f} samples/s  "
                  f"step {s['step_time_s'] * 1e3:8.1f} ms  comm share {s['comm_share']:.0%}  "
                  f"eval loss {s['eval_loss']:.4f}  ({time.monotonic() - t0:.0f} s)",
                  flush=True)
            runs[hook].append(s)
    out: dict[str, Any] = {"args": args, "hooks": {}}
    base = statistics.median(r["samples_per_s"] for r in runs["none"])
    base_loss = statistics.median(r["eval_loss"] for r in runs["none"])
    for hook, rs in runs.items():
        sps = statistics.median(r["samples_per_s"] for r in rs)
        loss = statistics.median(r["eval_loss"] for r in rs)
        out["hooks"][hook] = {
            "samples_per_s": sps,
            "samples_per_s_runs": [r["samples_per_s"] for r in rs],
            "speedup_vs_none": sps / base,
            "step_time_s": statistics.median(r["step_time_s"] for r in rs),
            "compute_s": statistics.median(r["compute_s"] for r in rs),
            "comm_wait_s": statistics.median(r["comm_wait_s"] for r in rs),
            "comm_share": statistics.median(r["comm_share"] for r in rs),
            "bytes_per_step": rs[0]["bytes_per_step"],
            "eval_loss": loss,
            "eval_loss_vs_none": loss / base_loss - 1.0,
            "eval_accuracy": statistics.median(r["eval_accuracy"] for r in rs),
            "steps": rs[0]["steps"],
            "parameters": rs[0]["parameters"],
        }
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--rate", default="1gbit")
    p.add_argument("--name", default="trbench")
    p.add_argument("--model", default="mlp", help="comm-bound model")
    p.add_argument("--width", type=int, default=5000, help="comm-bound model width")
    p.add_argument("--depth", type=int, default=2, help="comm-bound model depth")
    p.add_argument("--hooks", default=",".join(HOOKS), help="comma-separated hooks to run")
    p.add_argument("--steps", type=int, default=20, help="comm-bound steps per run")
    p.add_argument("--batch-size", type=int, default=4, help="comm-bound batch per rank")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--cb-steps", type=int, default=30, help="compute-bound steps per run")
    p.add_argument("--cb-batch-size", type=int, default=8192)
    p.add_argument("--cb-repeats", type=int, default=3)
    p.add_argument("--skip-compute-bound", action="store_true")
    p.add_argument("--skip-comm-bound", action="store_true")
    p.add_argument("--out", default="benchmarks/results/train_comm_hooks.json")
    a = p.parse_args()

    hooks = tuple(h for h in a.hooks.split(",") if h)
    if "none" not in hooks:
        hooks = ("none", *hooks)
    comm_args = ["--model", a.model, "--width", str(a.width), "--depth", str(a.depth),
                 "--samples", "8192",
                 "--batch-size", str(a.batch_size), "--max-steps", str(a.steps),
                 "--log-every", str(a.steps), "--lr", str(a.lr), "--eval-samples", "1024"]
    cb_args = ["--model", "mlp", "--width", "256", "--depth", "3", "--samples", "262144",
               "--batch-size", str(a.cb_batch_size), "--max-steps", str(a.cb_steps),
               "--log-every", str(a.cb_steps), "--lr", "0.05"]
    report: dict[str, Any] = {
        "benchmark": "train_comm_hooks",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": platform.node(), "cpus": os.cpu_count(),
        "load_avg_start": os.getloadavg(),
        "lab": {"nodes": a.nodes, "rate": a.rate, "ranks_per_node": 1},
    }
    port = [29600]
    with Lab(name=a.name, nodes=a.nodes, rate=a.rate) as lab:
        if not a.skip_comm_bound:
            report["comm_bound"] = bench(lab, "comm-bound", comm_args, hooks, a.repeats,
                                         a.steps * 30 + 120, port)
        if not a.skip_compute_bound:
            report["compute_bound"] = bench(lab, "compute-bound", cb_args, hooks,
                                            a.cb_repeats, a.cb_steps * 30 + 120, port)
    report["load_avg_end"] = os.getloadavg()
    targets: dict[str, Any] = {}
    if "comm_bound" in report:
        h = report["comm_bound"]["hooks"]
        if "bf16" in h:
            targets["bf16_speedup>=1.7"] = h["bf16"]["speedup_vs_none"] >= 1.7
        if "powersgd" in h:
            targets["powersgd_speedup>=3"] = h["powersgd"]["speedup_vs_none"] >= 3.0
        targets["eval_loss_within_5pct"] = all(abs(v["eval_loss_vs_none"]) <= 0.05
                                               for v in h.values())
    if "compute_bound" in report:
        h = report["compute_bound"]["hooks"]
        targets["compute_bound_cost<=5pct"] = all(v["speedup_vs_none"] >= 0.95
                                                  for v in h.values())
    report["targets"] = targets
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as fh:
        json.dump(report, fh, indent=2)
    print(json.dumps(targets, indent=2))
    return 0 if all(targets.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
