"""Time from a fault to the watch's verdict, per case of issue 27, on a 3-node lab at default
watch settings (no ``watch_timeout``): seconds from the fault to the hub writing
``report.json``, the median of ``--repeat`` runs, with the kind named, whether rank 2 and its
host were named, and every rank's exit code.

Each run is ``tests/watch/scenario.py`` on every node of one shared lab (one rank per node,
rank 2 misbehaves at step 150, ~3 s into the loop: past the warm-up, whose faults get its
60 s allowance, ``watch.threshold``): killed (SIGKILL), stopped (SIGSTOP; continued after rank
0's verdict), link down (``lab.fault("link-down", 2)`` once node 0 reported step 140), data loader
stuck, shape mismatch, dtype mismatch, a skipped collective (no hang), an extra collective
at the end, and a healthy run whose rank 0 saves a checkpoint for 20 s at steps 10 and 30 (it
passes when nothing is named and every rank exits 0).

    .venv/bin/python benchmarks/watch_detect.py [--cases a,b] [--repeat 3] [--json]
        [--backend gloo|nccl] [--out FILE] [--update]

``--backend nccl`` runs the same cases over NCCL (each lab node on cuda:0: NCCL's socket
transport over the lab's veths); without CUDA it fails at once with one line. Needs root
(network namespaces), like ``ddpnet lab``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SCENARIO = str(ROOT / "tests" / "watch" / "scenario.py")
FAULT_RANK = 2
#: the step rank 2 misbehaves at: the job has stepped for seconds and learned its threshold
#: (a fault before every rank has 10 gaps after its first 2 steps gets the warm-up's 60 s:
#: ``watch.gaps``; a 25 ms loop has them by step 40)
FAULT_STEP = 150
#: seconds one run may take (a stall at the default 60 s threshold, plus start and exit)
RUN_TIMEOUT_S = 240.0


@dataclass(frozen=True)
class Case:
    mode: str                 # scenario.py's MODE
    kind: str | None          # the kind expected; None: no alarm
    lab_fault: str = ""       # a lab fault injected mid-run instead of one in the script
    steps: int = 300


CASES = {
    "killed": Case("kill", "rank-gone"),
    "stopped": Case("stop", "rank-gone"),
    "link-down": Case("ok", "network", lab_fault="link-down", steps=100000),
    "data-loader": Case("sleepdata", "rank-not-arriving"),
    "shape": Case("shape", "collective-mismatch"),
    "dtype": Case("dtype", "collective-mismatch"),
    "skipped": Case("desync", "collective-mismatch"),
    "extra-at-end": Case("extra", "collective-mismatch"),
    "checkpoint": Case("checkpoint", None, steps=45),
}


class Driver:
    """Per run: finds the fault time in the output, injects a lab fault, continues a stopped
    rank after rank 0's verdict."""

    def __init__(self, lab: Any, case: Case) -> None:
        self.lab, self.case = lab, case
        self.fault_at: float | None = None
        self.pid: int | None = None
        self.steps = 0

    def on_line(self, node: Any, stream: str, line: str) -> None:
        if node.index == FAULT_RANK and line.startswith("pid "):
            self.pid = int(line.split()[1])
        if line.startswith("fault ") and not self.case.lab_fault:  # "ok" prints one too
            self.fault_at = float(line.split()[2])
        if node.index == 0 and line.startswith("step ") and self.case.lab_fault:
            self.steps += 1
            if self.steps == FAULT_STEP // 20 + 1 and self.fault_at is None:  # step 140
                threading.Thread(target=self.inject, daemon=True).start()
        if node.index == 0 and "exits (4)" in line and self.case.mode == "stop" and self.pid:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGCONT)

    def inject(self) -> None:
        self.lab.fault(self.case.lab_fault, FAULT_RANK)
        self.fault_at = time.time()


def run_once(lab: Any, name: str, case: Case, backend: str) -> dict[str, Any]:
    directory = Path(tempfile.mkdtemp(prefix=f"watch-detect-{name}-"))
    driver = Driver(lab, case)
    started = time.time()
    results = lab.run([sys.executable, SCENARIO, case.mode], timeout=RUN_TIMEOUT_S,
                      env={"PYTHONPATH": str(ROOT / "src"), "WATCH_TIMEOUT": "",
                           "FAULT_RANK": str(FAULT_RANK), "FAULT_STEP": str(FAULT_STEP),
                           "STEPS": str(case.steps), "DDPNET_WATCH_DIR": str(directory),
                           "SCENARIO_BACKEND": backend, "OMP_NUM_THREADS": "1"},
                      on_line=driver.on_line)
    if case.lab_fault:
        lab.clear(FAULT_RANK)
    report_path = directory / "report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else None
    verdict_at = report_path.stat().st_mtime if report is not None else None
    codes = [r.returncode for r in results]
    diagnosis = (report or {}).get("diagnosis", {})
    host = lab.nodes[FAULT_RANK].hostname
    named = FAULT_RANK in diagnosis.get("ranks", []) and host in json.dumps(diagnosis)
    seconds = verdict_at - driver.fault_at if verdict_at and driver.fault_at else None
    if case.kind is None:
        ok = report is None and codes == [0, 0, 0]
    else:
        # a killed rank is not live; gloo aborts a rank that receives the wrong size (-6,
        # SIGABRT from gloo's own thread: nothing can catch it)
        live = [c for i, c in enumerate(codes) if not (case.mode == "kill" and i == FAULT_RANK)
                and not (c == -6 and case.kind == "collective-mismatch")]
        ok = (report is not None and report.get("kind") == case.kind and named
              and all(c == 4 for c in live))
    return {"seconds": round(seconds, 2) if seconds is not None else None,
            "kind": report.get("kind") if report else None, "named_rank_and_host": named,
            "codes": codes, "ok": ok, "wall_s": round(time.time() - started, 1),
            "summary": diagnosis.get("summary", "")}


def measure(lab: Any, names: list[str], repeat: int, backend: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in names:
        runs = [run_once(lab, name, CASES[name], backend) for _ in range(repeat)]
        times = [r["seconds"] for r in runs if r["seconds"] is not None]
        out[name] = {"expected": CASES[name].kind or "no alarm",
                     "median_s": round(statistics.median(times), 2) if times else None,
                     "within_15_s": bool(times) and statistics.median(times) <= 15.0,
                     "all_ok": all(r["ok"] for r in runs), "runs": runs}
        print(f"{name:<13} median {out[name]['median_s']} s  ok {out[name]['all_ok']}  "
              f"kinds {[r['kind'] for r in runs]}  codes {[r['codes'] for r in runs]}",
              file=sys.stderr, flush=True)
    return out


def cuda_missing() -> str | None:
    """Why NCCL cannot run here, or None."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA device (torch.cuda.is_available() is False)"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(CASES),
                        help=f"comma-separated, of: {', '.join(CASES)}")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--out", default=str(RESULTS / "watch_detect.json"))
    parser.add_argument("--update", action="store_true",
                        help="replace only the cases measured in an existing --out file")
    args = parser.parse_args()
    names = [n.strip() for n in args.cases.split(",") if n.strip()]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        print(f"watch_detect: unknown case(s) {', '.join(unknown)}; hint: choose from "
              f"{', '.join(CASES)}", file=sys.stderr)
        return 2
    if args.backend == "nccl":
        why = cuda_missing()
        if why is not None:
            print(f"watch_detect: --backend nccl needs a CUDA GPU: {why}; hint: run it on a "
                  f"GPU machine or use --backend gloo", file=sys.stderr)
            return 2
    sys.path.insert(0, str(ROOT))
    from tests.lab_util import fresh_lab

    load = os.getloadavg()[0]
    with fresh_lab("wdb", nodes=3) as lab:
        cases = measure(lab, names, args.repeat, args.backend)
    result = {"benchmark": "watch_detect", "backend": args.backend, "repeat": args.repeat,
              "nodes": 3, "settings": "default (no watch_timeout)", "fault_step": FAULT_STEP,
              "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "host": platform.node(), "cpus": os.cpu_count(),
              "loadavg_before": load, "loadavg_after": os.getloadavg()[0], "cases": cases}
    out = Path(args.out)
    if args.update and out.exists():
        before = json.loads(out.read_text())
        result["cases"] = {**before.get("cases", {}), **cases}
        result["updated"] = {name: result["measured"] for name in cases}
        result["measured"] = before.get("measured", result["measured"])
    out.write_text(json.dumps(result, indent=1) + "\n")
    if args.json:
        print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
