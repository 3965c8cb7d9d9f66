"""The watch's soak (issue 56): healthy 3-node lab jobs under the watch for ``--minutes``,
through what a real cluster does to a healthy job, must end with zero verdicts; then a frozen
rank must still be named, with its cause, rank and host, within a fixed bound.

What the job goes through, all at once (one shared lab, one rank a node, ``ddpnet exec`` on
the unchanged script ``tests/watch/soak_job.py``, default watch settings):

- CPU noise: a spinner on every node, busy ``--spin-duty`` of the time in bursts of 0.05-2 s;
- unmarked checkpoints (I/O-bound) and evaluations (CPU-bound) on rank 0 every
  ``--pause-every`` seconds, while the others wait in the next all_reduce;
- delay and jitter on every node's link (``lab fault delay --ms X --jitter J``);
- link flaps: every ``--flap-every`` seconds one node's link (in turn 0, 1, 2: node 0 holds
  the hub and the master) goes down for ``--flap-s`` (4) seconds, then up.

After ``--minutes`` (no pause and no flap in its last ``--quiet-end`` seconds), rank 2 stops
itself (SIGSTOP; ``--freeze sleep``: it sleeps in its step, alive: ``rank-not-arriving``). A
verdict before that is a false one: its report is kept in the JSON, and a new job soaks the
rest of the time. Output: the duration, steps, verdicts (must be 0), flaps, pauses, and the
seconds from the freeze to the hub's report. Exit 0 when there was no false verdict and the
frozen rank was named within the bound. Needs root (namespaces).

    .venv/bin/python benchmarks/watch_soak.py [--minutes 30] [--out FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
JOB = str(ROOT / "tests" / "watch" / "soak_job.py")
FROZEN = 2
#: each node's link: (delay ms, jitter ms) on what it receives
LINKS = {0: (2.0, 1.0), 1: (5.0, 3.0), 2: (10.0, 5.0)}
#: the spinner: busy ``duty`` of the time, in bursts of 0.05-2 s
SPIN = """
import random, sys, time
duty = float(sys.argv[1])
while True:
    busy = random.uniform(0.05, 2.0)
    end = time.monotonic() + busy
    while time.monotonic() < end:
        pass
    time.sleep(busy * (1 - duty) / duty)
"""


@dataclass(frozen=True)
class Plan:
    """What the soak does, from the command line."""

    seconds: float
    freeze: str
    flap_every: float
    flap_s: float
    pause_every: float
    ckpt_s: float
    eval_s: float
    quiet_end: float
    spin_duty: float


@dataclass
class Job:
    """One job's lines: rank 0's steps and pauses, the freeze, each rank's exit line; a
    stopped rank is continued once ranks 0 and 1 are out (or after ``give_up_s``)."""

    give_up_s: float
    fault_at: float | None = None
    pid: int = 0
    steps: int = 0
    pauses: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    exits: dict[int, float] = field(default_factory=dict)
    resumed: float | None = None
    timer: threading.Timer | None = None

    def on_line(self, node: Any, stream: str, line: str) -> None:
        words = line.split()
        if line.startswith(("fault stop ", "fault sleep ")):
            self.fault_at, self.pid, self.steps = float(words[2]), int(words[3]), int(words[5])
            self.timer = threading.Timer(self.give_up_s, self.resume)
            self.timer.start()
        elif line.startswith("step ") and node.index == 0:
            self.steps = max(self.steps, int(words[1]))
        elif line.startswith("pause "):
            self.pauses.append({"kind": words[1], "at": float(words[2]),
                                "seconds": float(words[3])})
        elif line.startswith("ddpnet: watch: warning"):
            self.warnings.append(line[:300])
        elif line.startswith(f"ddpnet: watch: rank {node.index} exits"):
            self.exits[node.index] = time.time()
            if self.fault_at and {0, 1} <= set(self.exits):
                self.resume()

    def resume(self) -> None:
        if self.resumed is None and self.pid:
            self.resumed = time.time()
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGCONT)

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.resume()  # never leave a rank stopped


class Flapper(threading.Thread):
    """Takes one node's link down for ``flap_s`` every ``flap_every`` seconds, nodes in turn,
    until ``until`` (monotonic)."""

    def __init__(self, lab: Any, plan: Plan, until: float) -> None:
        super().__init__(daemon=True)
        self.lab, self.plan, self.until = lab, plan, until
        self.stop = threading.Event()
        self.flaps: list[dict[str, Any]] = []
        self.errors: list[str] = []

    def run(self) -> None:
        node = 0
        while not self.stop.wait(self.plan.flap_every):
            if time.monotonic() + self.plan.flap_s > self.until:
                return
            try:
                self.lab.fault("link-down", node, for_s=self.plan.flap_s)
                self.flaps.append({"node": node, "at": round(time.time(), 3)})
            except Exception as exc:  # keep flapping; the count says what was applied
                self.errors.append(f"node {node}: {exc}")
            node = (node + 1) % len(self.lab.nodes)


def spinners(lab: Any, duty: float) -> list[subprocess.Popen[Any]]:
    """One spinner a node (the lab's popen: ``down`` kills what is left)."""
    if duty <= 0:
        return []
    return [lab.popen(n.index, [sys.executable, "-c", SPIN, str(duty)],
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for n in lab.nodes]


def run_job(lab: Any, plan: Plan, soak_s: float, port: int) -> tuple[Job, dict[str, Any]]:
    """One job that soaks ``soak_s`` seconds, then freezes rank 2; its lines and the end."""
    from tests.watch.lab_watch import BOUND_S

    directory = Path(tempfile.mkdtemp(prefix="watch-soak-"))
    job = Job(give_up_s=BOUND_S + 60)
    try:
        results = lab.run([sys.executable, "-m", "ddpnet", "exec", "--", JOB],
                          timeout=soak_s + 300, master_port=port, on_line=job.on_line,
                          env={"PYTHONPATH": str(ROOT / "src"), "SOAK_S": str(soak_s),
                               "PAUSE_EVERY_S": str(plan.pause_every),
                               "CKPT_S": str(plan.ckpt_s), "EVAL_S": str(plan.eval_s),
                               "QUIET_END_S": str(plan.quiet_end),
                               "FREEZE_RANK": str(FROZEN), "FREEZE": plan.freeze,
                               "DDPNET_WATCH_DIR": str(directory),
                               "OMP_NUM_THREADS": "1"})
    finally:
        job.cancel()
    path = directory / "report.json"
    report = json.loads(path.read_text()) if path.exists() else None
    end = {"codes": [r.returncode for r in results], "report": report,
           "report_at": path.stat().st_mtime if report else None, "directory": str(directory),
           "stderr_tail": [r.stderr[-1500:] for r in results]}
    if job.fault_at is not None:  # the freeze's: its report is in the JSON; a false
        shutil.rmtree(directory, ignore_errors=True)  # verdict's dumps stay to be read
    return job, end


#: the freeze -> the kind that names it and the words of its cause
NAMED_AS = {"stop": ("rank-gone", "process stopped"), "sleep": ("rank-not-arriving",
                                                                "has not arrived")}


def frozen_named(lab: Any, job: Job, end: dict[str, Any], freeze: str) -> dict[str, Any]:
    """How the freeze was named: seconds to the report, kind, rank, host, cause."""
    from tests.watch.lab_watch import BOUND_S

    report = end["report"] or {}
    diagnosis = report.get("diagnosis", {})
    text = " ".join([diagnosis.get("summary", ""), *diagnosis.get("evidence", [])])
    host = lab.nodes[FROZEN].hostname
    seconds = end["report_at"] - job.fault_at if end["report_at"] and job.fault_at else None
    kind, cause = NAMED_AS[freeze]
    named = (report.get("kind") == kind and diagnosis.get("ranks") == [FROZEN]
             and f"rank {FROZEN} ({host}" in text and cause in text)
    return {"seconds": round(seconds, 2) if seconds is not None else None,
            "bound_s": BOUND_S, "within_bound": bool(named and seconds is not None
                                                     and seconds < BOUND_S),
            "kind": report.get("kind"), "ranks": diagnosis.get("ranks"), "host": host,
            "named_rank_host_cause": named, "summary": diagnosis.get("summary", ""),
            "threshold": report.get("threshold"), "codes": end["codes"],
            "resumed_after_s": round(job.resumed - job.fault_at, 2)
            if job.resumed and job.fault_at else None}


def false_verdict(job: Job, end: dict[str, Any], started: float) -> dict[str, Any]:
    """A job that ended before its freeze: the verdict (or crash) and what the hub saw."""
    report = end["report"] or {}
    diagnosis = report.get("diagnosis", {})
    return {"after_s": round(time.time() - started, 1), "steps": job.steps,
            "kind": report.get("kind"), "summary": diagnosis.get("summary"),
            "ranks": diagnosis.get("ranks"), "signals": diagnosis.get("signals"),
            "evidence": diagnosis.get("evidence"),
            "trigger": report.get("trigger"), "threshold": report.get("threshold"),
            "warnings": report.get("warnings"), "codes": end["codes"],
            "report": end["directory"] + "/report.json" if report else None,
            "stderr_tail": end["stderr_tail"]}


def soak(lab: Any, plan: Plan, port: int) -> dict[str, Any]:
    """Jobs until the soak's time is spent; the last one ends in the freeze."""
    started, deadline = time.time(), time.monotonic() + plan.seconds
    flapper = Flapper(lab, plan, deadline - plan.quiet_end)
    flapper.start()
    jobs: list[Job] = []
    falses: list[dict[str, Any]] = []
    frozen: dict[str, Any] = {}
    try:
        while not frozen and deadline - time.monotonic() > plan.quiet_end + 30:
            job, end = run_job(lab, plan, deadline - time.monotonic(), port + len(jobs))
            jobs.append(job)
            if job.fault_at is None:
                falses.append(false_verdict(job, end, started))
                print(f"watch_soak: job {len(jobs)} ended before its freeze: "
                      f"{falses[-1]['kind']}: {falses[-1]['summary']}", file=sys.stderr)
            else:
                frozen = frozen_named(lab, job, end, plan.freeze)
    finally:
        flapper.stop.set()
    ended = jobs[-1].fault_at if frozen and jobs[-1].fault_at else time.time()
    return {"duration_s": round(ended - started, 1),
            "jobs": len(jobs), "steps": sum(j.steps for j in jobs),
            "verdicts": len(falses), "false_verdicts": falses,
            "flaps": len(flapper.flaps), "flap_nodes": [f["node"] for f in flapper.flaps],
            "flap_errors": flapper.errors,
            "pauses": [p for j in jobs for p in j.pauses],
            "warnings": [w for j in jobs for w in j.warnings], "frozen": frozen}


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--freeze", choices=tuple(NAMED_AS), default="stop",
                        help="how rank 2 hangs after the soak: stop (SIGSTOP) or sleep")
    parser.add_argument("--flap-every", type=float, default=60.0, help="seconds (60)")
    parser.add_argument("--flap-s", type=float, default=4.0, help="seconds down (4)")
    parser.add_argument("--pause-every", type=float, default=150.0, help="seconds (150)")
    parser.add_argument("--ckpt-s", type=float, default=25.0)
    parser.add_argument("--eval-s", type=float, default=20.0)
    parser.add_argument("--quiet-end", type=float, default=60.0,
                        help="no pause or flap in the soak's last S seconds (60)")
    parser.add_argument("--spin-duty", type=float, default=0.3,
                        help="each node's spinner is busy this share of the time (0.3)")
    parser.add_argument("--port", type=int, default=29911)
    parser.add_argument("--note", default="", help="a line kept in the JSON")
    parser.add_argument("--out", default=str(RESULTS / "watch_soak.json"))
    return parser.parse_args()


def main() -> int:
    args = parse()
    plan = Plan(seconds=args.minutes * 60, freeze=args.freeze, flap_every=args.flap_every,
                flap_s=args.flap_s, pause_every=args.pause_every, ckpt_s=args.ckpt_s,
                eval_s=args.eval_s, quiet_end=args.quiet_end, spin_duty=args.spin_duty)
    sys.path.insert(0, str(ROOT))
    from tests.lab_util import fresh_lab

    load = os.getloadavg()
    with fresh_lab("wsk", nodes=3) as lab:
        for node, (ms, jitter) in LINKS.items():
            lab.fault("delay", node, ms=ms, jitter_ms=jitter)
        noise = spinners(lab, plan.spin_duty)
        try:
            found = soak(lab, plan, args.port)
        finally:
            for proc in noise:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
    ok = found["verdicts"] == 0 and bool(found["frozen"].get("within_bound"))
    result = {"benchmark": "watch_soak", "ok": ok, "minutes_asked": args.minutes,
              "note": args.note, "plan": asdict(plan),
              "links_delay_jitter_ms": {str(k): v for k, v in LINKS.items()}, **found,
              "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "host": platform.node(), "cpus": os.cpu_count(),
              "loadavg_before": load, "loadavg_after": os.getloadavg()}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("ok", "duration_s", "steps", "verdicts",
                                              "flaps")} | {"frozen_s":
                                                           found["frozen"].get("seconds")}))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
