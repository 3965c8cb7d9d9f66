"""How long a hang costs a ``ddpnet sbatch --requeue`` job without a spare node (issue #40).

A 4-node lab with a real SLURM (munged, slurmctld, a slurmd per node namespace, credentials
expiring after 5 s as in the tests); a 3-node ``ddpnet train --checkpoint-every 10 --step-sleep
0.1`` job (srun engine), node 1's link cut after step 20 is logged. Each trial on a fresh lab.
Figures per trial, seconds from the cut:

- ``verdict_s``: the job's watcher read the watch's verdict (its record's ``verdict`` event);
- ``drain_s``: the node drained with the verdict as reason (``drain`` event);
- ``requeue_s`` / ``down_s``: the job requeued, the unreachable node set DOWN;
- ``started_s``: SLURM started the requeued run (its StartTime, to the second);
- ``resumed_s``: the requeued run's rank 0 loaded the checkpoint (``resumed`` event; its first
  step follows within one step time, 0.1 s + compute);
- ``steps_lost``: the step the verdict caught the ranks at minus the step resumed from.

Goal (issue #40, with a spare node): training again within 60 s of the fault, no more steps
lost than one checkpoint interval. This is the path without a spare: the requeued job also
waits for its credential (5 s here, 120 s by SLURM's default).

    sudo .venv/bin/python benchmarks/recover_requeue.py [--trials 3] [--out FILE]

Writes benchmarks/results/recover_requeue.json (root and namespaces needed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
RESULTS = ROOT / "benchmarks" / "results"
CHECKPOINT_EVERY = 10
CUT_AFTER_STEP = 20


def _client(lab: Any, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    from ddpnet.lab import slurm as labslurm

    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([str(labslurm.client_wrapper(lab.name)), *argv], capture_output=True,
                          text=True, timeout=120, env=env, cwd=cwd)


def _job(lab: Any, job: str) -> dict[str, str]:
    out = _client(lab, "scontrol", "show", "job", job, "-o").stdout
    return {f.split("=", 1)[0]: f.split("=", 1)[1] for f in out.split() if "=" in f}


def _wait(what: str, ready: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.2)
    raise RuntimeError(f"no {what} within {timeout} s")


def trial(index: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="ddpnet-recover-bench-"))
    work.chmod(0o755)
    try:
        return _measure(index, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # its checkpoints and logs


def _measure(index: int, work: Path) -> dict[str, Any]:
    from ddpnet.lab import Lab
    from ddpnet.lab import slurm as labslurm

    with Lab(name=f"rb{os.getpid()}x{index}", nodes=4) as lab:
        labslurm.start(lab, cred_expire_s=5)
        job = ""
        try:
            p = _client(lab, sys.executable, "-m", "ddpnet", "sbatch", "--nodes", "3",
                        "--engine", "srun", "--ifname", lab.nodes[0].ifname, "--requeue",
                        "--output", str(work / "job-%j.out"), "--script", str(work / "job.sh"),
                        "--submit", "--", "-m", "ddpnet", "train", "--max-steps", "80",
                        "--samples", "4096", "--batch-size", "16", "--log-every", "5",
                        "--step-sleep", "0.1", "--checkpoint-every", str(CHECKPOINT_EVERY),
                        "--checkpoint-dir", str(work / "ckpt"), cwd=work)
            job = p.stdout.strip()
            log = work / f"job-{job}.out"

            def text() -> str:
                return log.read_text(errors="replace") if log.exists() else ""

            _wait("step 20", lambda: re.search(rf"^step {CUT_AFTER_STEP}/", text(), re.M), 300)
            lab.fault("link-down", 1)
            cut = time.time()
            _wait("completion", lambda: _job(lab, job).get("JobState") in (
                "COMPLETED", "FAILED", "CANCELLED"), 600)
            state = _job(lab, job)
            record = json.loads((work / f"ddpnet-job-{job}" / "recovery.json").read_text())
        finally:
            if job:
                _client(lab, "scancel", job)
            labslurm.stop(lab.name)
    started = time.mktime(time.strptime(state["StartTime"], "%Y-%m-%dT%H:%M:%S")) \
        if state.get("StartTime", "").startswith("20") else None
    return {
        "started_s": round(started - cut, 1) if started is not None else None,
        "state": state.get("JobState"), "restarts": state.get("Restarts"),
        "nodes_after": state.get("NodeList"),
        **figures(record, cut, ("verdict", "drain", "requeue", "down", "resumed")),
    }


def run_trials(trial: Any, count: int) -> list[dict[str, Any]]:
    """``count`` trials, each printed as a JSON line as it ends (a long run shows progress)."""
    trials = []
    for i in range(count):
        found = trial(i)
        print(json.dumps(found), flush=True)
        trials.append(found)
    return trials


def figures(record: dict[str, Any], cut: float, events: tuple[str, ...]) -> dict[str, Any]:
    """From a job's recovery record: seconds from the cut to each of ``events``, the steps
    lost (the verdict's step less the step resumed from) and the drain reason."""
    at = {e["what"]: e for e in record["events"]}
    verdict_step = int(at["verdict"]["step"])
    resumed_step = int(at["resumed"]["step"]) if "resumed" in at else -1
    return {
        **{f"{what}_s": round(at[what]["at"] - cut, 1) for what in events if what in at},
        "verdict_step": verdict_step, "resumed_step": resumed_step,
        "steps_lost": verdict_step - resumed_step if resumed_step >= 0 else None,
        "reason": at["drain"]["detail"] if "drain" in at else "",
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS / "recover_requeue.json")
    args = parser.parse_args()
    trials = run_trials(trial, args.trials)
    resumed = sorted(t["resumed_s"] for t in trials if "resumed_s" in t)
    out = {
        "what": "fault -> verdict -> drain -> requeue -> resumed, 3-node ddpnet train job on a "
                "4-node lab SLURM, no spare node, node 1's link cut after step 20",
        "host": platform.node(), "cpus": os.cpu_count(), "when": time.strftime("%Y-%m-%d"),
        "checkpoint_every": CHECKPOINT_EVERY, "cred_expire_s": 5, "trials": trials,
        "resumed_s_median": resumed[len(resumed) // 2] if resumed else None,
        "steps_lost_max": max((t["steps_lost"] for t in trials if t["steps_lost"] is not None),
                              default=None),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
