"""The watch on the trainers users run, unchanged (issue 55): does it slow them, does it
change their numbers?

Each trainer script of tests/watch/trainers/ (Lightning's Trainer and Fabric, Accelerate, the
transformers Trainer, ignite, DeepSpeed) runs as ``ddpnet launch --local 2`` (torchrun, two
gloo ranks on loopback) with the watch on (the default) and off (``DDPNET_WATCH=0``),
interleaved over rounds so that load on a shared machine hits both alike. Per trainer: rank
0's median step (from step 6 on: the scripts' ``timing`` line) on each side, the overhead,
the launch's wall time, and whether the final loss is the same bit for bit on every rank and
every run (the target: always).

    .venv/bin/python benchmarks/trainers_overhead.py [--rounds N] [--steps N]
        [--trainers a,b] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TRAINERS = ROOT / "tests" / "watch" / "trainers"
RESULTS = ROOT / "benchmarks" / "results"
SCRIPTS = {"lightning": "lightning_trainer.py", "fabric": "lightning_fabric.py",
           "accelerate": "accelerate_loop.py", "hf_trainer": "hf_trainer.py",
           "ignite": "ignite_loop.py", "deepspeed": "deepspeed_loop.py"}
LINE = re.compile(r"^(?:\[rank (\d+)\] )?(loss|timing) (.+)$")


def run(script: str, watch: bool, steps: int) -> dict[str, Any]:
    """One launch: its wall time, every rank's loss (repr) and rank 0's median step. Its
    port is launch --local's own, free when it starts (ports chosen up front were taken by
    then: a pre-flight refusal)."""
    with tempfile.TemporaryDirectory(prefix="trainers-bench-") as tmp:
        env = {**os.environ, "DDPNET_WATCH": "1" if watch else "0", "STEPS": str(steps),
               "CKPT_DIR": tmp, "DDPNET_WATCH_DIR": tmp, "OMP_NUM_THREADS": "1",
               "PYTHONPATH": str(ROOT / "src")}
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "ddpnet", "launch", "--local", "2", "--",
                               str(TRAINERS / script)],
                              capture_output=True, text=True, env=env, timeout=600)
        wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"{script} (watch {watch}) exited {proc.returncode}:\n"
                         f"{proc.stderr[-3000:]}")
    losses: dict[int, str] = {}
    step_s = None
    for line in proc.stdout.splitlines():
        found = LINE.match(line)
        if not found:
            continue
        rank = int(found.group(1) or 0)
        if found.group(2) == "loss":
            losses[rank] = found.group(3)
        elif rank == 0:
            step_s = float(json.loads(found.group(3))["step_s"])
    return {"wall_s": wall, "losses": losses, "step_s": step_s}


def measure(name: str, rounds: int, steps: int) -> dict[str, Any]:
    runs: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
    for i in range(rounds):
        for watch in ((True, False) if i % 2 == 0 else (False, True)):
            runs[watch].append(run(SCRIPTS[name], watch, steps))
    losses = {loss for side in runs.values() for r in side for loss in r["losses"].values()}

    def median(watch: bool, key: str) -> float:
        return statistics.median(r[key] for r in runs[watch] if r[key] is not None)

    on, off = median(True, "step_s"), median(False, "step_s")
    return {"step_ms_unwatched": round(off * 1e3, 3), "step_ms_watched": round(on * 1e3, 3),
            "overhead_pct": round((on - off) / off * 100, 1),
            "launch_s_unwatched": round(median(False, "wall_s"), 2),
            "launch_s_watched": round(median(True, "wall_s"), 2),
            "same_loss_bit_for_bit": len(losses) == 1, "losses": sorted(losses),
            "runs_per_side": rounds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--trainers", default=",".join(SCRIPTS))
    parser.add_argument("--out", type=Path, default=RESULTS / "trainers_overhead.json")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.trainers.split(",") if n.strip()]
    unknown = sorted(set(names) - set(SCRIPTS))
    if unknown:
        parser.error(f"unknown trainer(s) {', '.join(unknown)}: one of {', '.join(SCRIPTS)}")
    results = {}
    for name in names:
        results[name] = measure(name, args.rounds, args.steps)
        print(f"{name}: {json.dumps(results[name])}", flush=True)
    doc = {"benchmark": "trainers_overhead", "host": platform.node(),
           "cpus": os.cpu_count(), "python": platform.python_version(),
           "steps": args.steps, "date": time.strftime("%Y-%m-%d"), "trainers": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0 if all(r["same_loss_bit_for_bit"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
