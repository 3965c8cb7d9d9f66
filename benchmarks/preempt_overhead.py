"""The cost of preemption handling in ``ddpnet train``: one all-reduce of one integer per
step (``ddpnet.train.preempt.agree``), on only with ``--checkpoint-dir``.

Runs ``ddpnet train --local 2 --json`` (CPU, gloo over loopback, the default MLP) without and
with ``--checkpoint-dir``, alternating, ``--repeats`` times each, and compares the median of
the runs' mean step times. Checkpoints are written only at the end (timed steps exclude it).
The machine is shared, so the figure is a median of alternated runs, not one pair.
It also times ``agree`` alone: 2000 calls in a 2-rank gloo group on loopback (the median
call), the exact cost added to every step.

    .venv/bin/python benchmarks/preempt_overhead.py --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def one(steps: int, checkpoint_dir: str | None) -> float:
    argv = [sys.executable, "-m", "ddpnet", "train", "--local", "2", "--json",
            "--max-steps", str(steps), "--samples", "16384", "--batch-size", "32",
            "--log-every", str(steps)]
    if checkpoint_dir:
        argv += ["--checkpoint-dir", checkpoint_dir]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, check=True)
    return float(json.loads(out.stdout)["step_time_s"])


def agree_worker() -> None:
    """One rank of the micro-benchmark (started by :func:`agree_latency`)."""
    import torch.distributed as dist

    from ddpnet.train.preempt import StopRequest, agree

    dist.init_process_group("gloo")
    stop = StopRequest()
    times = []
    for _ in range(2000):
        t0 = time.perf_counter()
        agree(stop, "cpu")
        times.append(time.perf_counter() - t0)
    if dist.get_rank() == 0:
        print(json.dumps({"agree_us_median": round(statistics.median(times) * 1e6, 1),
                          "agree_us_p90": round(sorted(times)[1800] * 1e6, 1)}))
    dist.destroy_process_group()


def agree_latency() -> dict[str, float]:
    from ddpnet.local import LocalRanks

    with LocalRanks([sys.executable, __file__, "--worker"], 2, capture=True) as ranks:
        result = ranks.wait(timeout=300)
    out: dict[str, float] = json.loads(result.exits[0].stdout)
    return out


def main() -> None:
    if "--worker" in sys.argv:
        agree_worker()
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()
    off, on = [], []
    for _ in range(args.repeats):
        off.append(one(args.steps, None))
        with tempfile.TemporaryDirectory() as d:
            on.append(one(args.steps, d))
    m_off, m_on = statistics.median(off), statistics.median(on)
    print(json.dumps({**agree_latency(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "steps": args.steps, "repeats": args.repeats,
        "step_ms_without": round(m_off * 1e3, 3), "step_ms_with": round(m_on * 1e3, 3),
        "overhead_pct": round((m_on / m_off - 1) * 100, 2),
        "runs_ms_without": [round(x * 1e3, 3) for x in off],
        "runs_ms_with": [round(x * 1e3, 3) for x in on],
    }, indent=1))


if __name__ == "__main__":
    main()
