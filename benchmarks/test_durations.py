"""Where `make test`'s time goes: per test, per module, and on what (issue 39).

    python benchmarks/test_durations.py [--out benchmarks/results/test_durations.json] \
        [--keep DIR] [COMMAND...]

Runs the suite as `make test` does (``make test-suite``: the parallel run, then the ``solo``
tests alone; or COMMAND), with the profiling plugin of ``tests/profiling.py`` on, then sums
its lines: every test's wall seconds (setup + call + teardown, where a module's shared lab or
cluster is charged to the test that first asked for it), its own CPU, its children's CPU (the
ranks, lab nodes and daemons it started: mostly Python and torch starting), and what it spent
building labs, starting SLURM and sshd, sleeping, and in subprocess's waits. What is left of
the wall time after those is waiting: on ranks, on timeouts the test provokes on purpose, on
the other workers' CPU.

The JSON holds the run's wall time and outcome counts, the slowest tests, every module, and the
totals by kind; the ten slowest are printed.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("lab_s", "slurm_s", "sshd_s", "sleep_s", "wait_s")
#: what `make test` runs once set up and linted (the Makefile holds its phases)
DEFAULT_COMMAND = ["make", "-s", "test-suite"]


def run_suite(command: list[str], profile: Path) -> tuple[float, int, str]:
    """The suite's wall seconds, return code and last line."""
    env = {**os.environ, "DDPNET_TEST_PROFILE": str(profile)}
    started = time.monotonic()
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    tail = [line for line in proc.stdout.splitlines() if line.strip()]
    (profile / "pytest.out").write_text(proc.stdout + proc.stderr)
    return wall, proc.returncode, tail[-1] if tail else ""


def read_lines(profile: Path) -> dict[str, dict[str, Any]]:
    """Each test's phases summed, with the worker that ran it."""
    tests: dict[str, dict[str, Any]] = {}
    for part in sorted(profile.glob("*.jsonl")):
        for raw in part.read_text().splitlines():
            line = json.loads(raw)
            t = tests.setdefault(line["test"], collections.defaultdict(float))
            t["worker"] = part.stem
            t[f"{line['phase']}_s"] += line["wall_s"]
            for key, value in line.items():
                if key not in ("test", "phase") and isinstance(value, (int, float)):
                    t[key] += value
    return {name: dict(t) for name, t in tests.items()}


def spent_on(t: dict[str, Any]) -> str:
    """What a test's wall time mostly went on."""
    parts = {kind[:-2]: t.get(kind, 0.0) for kind in KINDS}
    parts["waiting on processes"] = parts.pop("wait")
    parts["own cpu"] = t.get("cpu_s", 0.0)
    parts["processes it started (cpu)"] = t.get("children_cpu_s", 0.0)
    parts["waiting"] = max(0.0, t["wall_s"] - sum(parts.values()))
    return max(parts, key=lambda k: parts[k])


def summarise(tests: dict[str, dict[str, Any]]) -> dict[str, Any]:
    rows = []
    for name, t in tests.items():
        row = {"test": name, "worker": t["worker"], "wall_s": round(t["wall_s"], 2),
               **{k: round(t.get(k, 0.0), 2) for k in
                  ("setup_s", "call_s", "teardown_s", "cpu_s", "children_cpu_s", *KINDS)},
               "spent_on": spent_on(t)}
        rows.append(row)
    rows.sort(key=lambda r: -r["wall_s"])
    modules: dict[str, dict[str, float]] = collections.defaultdict(
        lambda: collections.defaultdict(float))
    for r in rows:
        m = modules[r["test"].split("::")[0]]
        m["tests"] += 1
        for key in ("wall_s", "cpu_s", "children_cpu_s", *KINDS):
            m[key] += r[key]
    by_module = sorted(({"module": k, **{kk: round(vv, 2) for kk, vv in v.items()}}
                        for k, v in modules.items()), key=lambda m: -m["wall_s"])
    totals = {key: round(sum(r[key] for r in rows), 1)
              for key in ("wall_s", "cpu_s", "children_cpu_s", *KINDS)}
    return {"tests": len(rows), "sum_of_test_wall_s": totals.pop("wall_s"), "totals": totals,
            "slowest": rows[:40], "modules": by_module,
            "all": [{"test": r["test"], "wall_s": r["wall_s"]} for r in rows]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/test_durations.json")
    parser.add_argument("--keep", type=Path, help="keep the raw lines (and pytest's output) here")
    parser.add_argument("--from", dest="source", type=Path,
                        help="sum the lines of a run made already (DDPNET_TEST_PROFILE=DIR "
                             "make test) instead of running the suite")
    parser.add_argument("--wall", type=float, help="with --from: that run's wall seconds")
    parser.add_argument("command", nargs="*", help="after --: what runs the suite")
    args = parser.parse_args()
    command = args.command or DEFAULT_COMMAND
    if args.source:
        profile, wall, rc, last = args.source, args.wall or 0.0, 0, "summed from a run made"
        command = ["make", "test"]
    else:
        profile = args.keep or Path(tempfile.mkdtemp(prefix="ddpnet-durations-"))
        profile.mkdir(parents=True, exist_ok=True)
        wall, rc, last = run_suite(command, profile)
    summary = summarise(read_lines(profile))
    result = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "machine": f"{os.cpu_count()} cores, {platform.machine()}, "
                         f"python {platform.python_version()}",
              "command": command, "wall_s": round(wall, 1), "returncode": rc,
              "outcome": last, **summary}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"suite: {wall:.0f} s wall, rc {rc}: {last}")
    for r in summary["slowest"][:10]:
        print(f"{r['wall_s']:7.1f} s  {r['spent_on']:<28} {r['test']}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
