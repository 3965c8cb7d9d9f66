"""Benchmark: how long ``ddpnet.init()`` takes to come up, and to fail, versus plain
``init_process_group`` (4 lab nodes, gloo, one process per node).

    sudo .venv/bin/python benchmarks/init_failfast.py [--nodes 4] [--repeat 3]

Scenarios, timed inside each rank from the call to its return or exception (torch already
imported, so import skew is excluded):
  healthy   ddpnet.init() vs init_process_group with GLOO_SOCKET_IFNAME=eth0 set by hand
            (the cost of the preflight on a working cluster);
  filtered  MASTER_PORT dropped on node 0, ranks 1.. only: ddpnet.init(connect_timeout=5)
            vs init_process_group(timeout=30) (torch's default would be 1800 s);
  missing   the last rank never starts: ddpnet.init(connect_timeout=5, so join_timeout=5)
            names it on every rank that came vs init_process_group(timeout=30).
Writes benchmarks/results/init_failfast.json. Needs root (network namespaces).
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

from ddpnet.lab import Lab

PORT = 29541
WORKER = r"""
import json, os, sys, time
from datetime import timedelta
import torch, torch.distributed as dist
import ddpnet
from ddpnet.errors import RendezvousError
mode = sys.argv[1]
t0 = time.perf_counter()
try:
    if mode == "ddpnet":
        ddpnet.init(connect_timeout=float(sys.argv[2]))
    else:
        os.environ["GLOO_SOCKET_IFNAME"] = "eth0"
        dist.init_process_group("gloo", timeout=timedelta(seconds=float(sys.argv[2])))
    t = torch.ones(1); dist.all_reduce(t)
    out = {"ok": True, "s": time.perf_counter() - t0, "sum": t.item()}
except RendezvousError as exc:
    out = {"ok": False, "s": time.perf_counter() - t0, "cause": exc.cause}
except Exception as exc:
    out = {"ok": False, "s": time.perf_counter() - t0, "error": str(exc).splitlines()[0][:200]}
print(json.dumps(out), flush=True)
os._exit(0)
"""


def run(lab: Lab, mode: str, limit: float, nodes: list[int] | None, port: int,
        env: dict[str, str]) -> list[dict[str, object]]:
    results = lab.run([sys.executable, "-c", WORKER, mode, str(limit)], nodes=nodes,
                      timeout=limit + 120, master_port=port, env=env)
    outs = []
    for r in results:
        lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
        outs.append(json.loads(lines[-1]) if lines else {"ok": False, "s": None,
                                                          "error": r.stderr[-300:]})
    return outs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    world = {"WORLD_SIZE": str(args.nodes), "NNODES": str(args.nodes)}
    rows: dict[str, list[list[dict[str, object]]]] = {
        "healthy_ddpnet": [], "healthy_plain": [], "filtered_ddpnet": [], "filtered_plain": [],
        "missing_ddpnet": [], "missing_plain": []}
    with Lab(name=f"ntb{os.getpid()}", nodes=args.nodes) as lab:
        others = list(range(1, args.nodes))
        for i in range(args.repeat):
            port = PORT + 10 * i
            rows["healthy_ddpnet"].append(run(lab, "ddpnet", 60, None, port, {}))
            rows["healthy_plain"].append(run(lab, "plain", 60, None, port + 1, {}))
            lab.fault("block-port", 0, port=port + 2)
            env = {**world, "MASTER_ADDR": lab.master_addr}
            per_rank = [{**env, "RANK": str(n), "NODE_RANK": str(n)} for n in others]
            # lab.run gives every node the same env: one popen per rank, all in parallel
            procs = []
            for n, e in zip(others, per_rank, strict=True):
                procs.append(lab.popen(n, [sys.executable, "-c", WORKER, "ddpnet", "5"],
                                       env={**e, "MASTER_PORT": str(port + 2)},
                                       stdout=-1, stderr=-1, text=True))
            rows["filtered_ddpnet"].append([json.loads(p.communicate()[0].splitlines()[-1])
                                            for p in procs])
            if i == 0:  # 30 s per run: once is enough to show it waits its whole timeout
                procs = [lab.popen(n, [sys.executable, "-c", WORKER, "plain", "30"],
                                   env={**e, "MASTER_PORT": str(port + 2)},
                                   stdout=-1, stderr=-1, text=True)
                         for n, e in zip(others, per_rank, strict=True)]
                rows["filtered_plain"].append([json.loads(p.communicate()[0].splitlines()[-1])
                                               for p in procs])
            lab.clear()
            # the last node's rank never starts; the others are told WORLD_SIZE of all
            came = list(range(args.nodes - 1))
            rows["missing_ddpnet"].append(run(lab, "ddpnet", 5, came, port + 3, world))
            if i == 0:
                rows["missing_plain"].append(run(lab, "plain", 30, came, port + 4, world))

    def summary(runs: list[list[dict[str, object]]]) -> dict[str, object]:
        times = [max(float(o["s"]) for o in r if o.get("s") is not None) for r in runs]  # type: ignore[arg-type]
        return {"runs": len(runs), "slowest_rank_s_median": round(statistics.median(times), 3),
                "slowest_rank_s": [round(t, 3) for t in times],
                "all_ok": all(o.get("ok") for r in runs for o in r),
                "outcomes": sorted({str(o.get("cause") or o.get("error") or "ok")[:80]
                                    for r in runs for o in r})}

    result = {
        "benchmark": "init_failfast", "nodes": args.nodes, "backend": "gloo",
        "host": platform.node(), "cpus": os.cpu_count(), "loadavg": os.getloadavg(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "scenarios": {k: summary(v) for k, v in rows.items() if v},
    }
    out = Path(__file__).with_name("results") / "init_failfast.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["scenarios"], indent=2))


if __name__ == "__main__":
    main()
