"""Benchmark: ``ddpnet lab up --nodes N`` then ``down`` (target: N=8 in under 5 s).

    sudo .venv/bin/python benchmarks/lab_up_down.py [--nodes 8] [--repeat 5] [--rate 1gbit]

Times the Python API (what the CLI calls) and, once, the real CLI round trip; writes
benchmarks/results/lab_up_down.json. Needs root.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ddpnet.lab import Lab

TARGET_S = 5.0


def one(name: str, nodes: int, rate: str | None) -> tuple[float, float]:
    lab = Lab(name=name, nodes=nodes, rate=rate)
    t0 = time.perf_counter()
    lab.up()
    t1 = time.perf_counter()
    # sanity: the last node reaches the first (a lab that is "up" but broken would be cheaper)
    ping = lab.exec(nodes - 1, ["ping", "-c1", "-W2", lab.master_addr], timeout=10)
    if ping.returncode != 0:
        lab.down()
        raise SystemExit(f"lab {name} is up but node {nodes - 1} cannot reach node 0")
    t2 = time.perf_counter()
    lab.down()
    t3 = time.perf_counter()
    return t1 - t0, t3 - t2


def cli_round_trip(name: str, nodes: int) -> float:
    t0 = time.perf_counter()
    for args in (["up", "--nodes", str(nodes)], ["down"]):
        subprocess.run([sys.executable, "-m", "ddpnet", "lab", *args, "--name", name],
                       check=True, capture_output=True, timeout=60)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rate", default="1gbit", help="tc shaping on every link ('' for none)")
    ap.add_argument("--scale", default="32,128",
                    help="also time these node counts once each ('' to skip)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "lab_up_down.json"))
    args = ap.parse_args()
    name = f"lbbench{os.getpid()}"
    ups, downs = [], []
    for _ in range(args.repeat):
        up, down = one(name, args.nodes, args.rate or None)
        ups.append(up)
        downs.append(down)
    totals = [u + d for u, d in zip(ups, downs, strict=True)]
    cli = cli_round_trip(name, args.nodes)
    scaling = {}
    for count in (int(c) for c in args.scale.split(",") if c.strip()):
        up, down = one(name, count, args.rate or None)
        scaling[str(count)] = {"up_s": up, "down_s": down}
    result = {
        "benchmark": "lab_up_down",
        "nodes": args.nodes,
        "rate": args.rate or None,
        "repeat": args.repeat,
        "up_s": {"median": statistics.median(ups), "max": max(ups), "all": ups},
        "down_s": {"median": statistics.median(downs), "max": max(downs), "all": downs},
        "up_plus_down_s": {"median": statistics.median(totals), "max": max(totals)},
        "cli_up_plus_down_s": cli,
        "scaling": scaling,
        "target_s": TARGET_S,
        "pass": max(totals) < TARGET_S and cli < TARGET_S,
        "host": {"kernel": platform.release(), "cpus": os.cpu_count(),
                 "loadavg_1m": os.getloadavg()[0]},
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"lab up {args.nodes} nodes: median {result['up_s']['median']:.3f} s, "
          f"down: median {result['down_s']['median']:.3f} s, worst up+down "
          f"{result['up_plus_down_s']['max']:.3f} s; CLI up+down {cli:.3f} s "
          f"(target < {TARGET_S:g} s: {'pass' if result['pass'] else 'FAIL'}) -> {args.out}")
    for count, t in scaling.items():
        print(f"  {count} nodes: up {t['up_s']:.3f} s, down {t['down_s']:.3f} s")
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
