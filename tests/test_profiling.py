"""The suite's own machinery (tests/profiling.py, tests/conftest.py): the profile lines a test
run writes, the longest-first order xdist hands out, and what ``--fast`` leaves out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.conftest import clean_environ, longest_first, module_costs, recorded_costs

ROOT = Path(__file__).resolve().parent.parent

SAMPLE = '''
import subprocess, sys, time

def test_sleeps():
    time.sleep(0.3)

def test_waits_on_a_child():
    subprocess.run([sys.executable, "-c", "import time; time.sleep(0.3)"], timeout=30)
'''


def test_each_phase_of_each_test_is_a_line_with_what_it_spent(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    out = tmp_path / "profile"
    env = clean_environ({"DDPNET_TEST_PROFILE": str(out), "PYTHONPATH": str(ROOT)})
    env.pop("PYTEST_XDIST_WORKER", None)  # this test's own worker: the sample runs alone
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.profiling",
                           "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [json.loads(x) for x in (out / "main.jsonl").read_text().splitlines()]
    by = {(line["test"].split("::")[1], line["phase"]): line for line in lines}
    assert {p for _, p in by} == {"setup", "call", "teardown"} and len(lines) == 6
    slept = by[("test_sleeps", "call")]
    assert slept["sleep_s"] >= 0.3 and slept["wall_s"] >= slept["sleep_s"]
    waited = by[("test_waits_on_a_child", "call")]
    # the child's own sleep is no CPU; the wait is subprocess's, not the test's sleep
    assert waited["wall_s"] >= 0.3 and "sleep_s" not in waited
    assert waited["children_cpu_s"] > 0


def test_without_the_variable_nothing_is_written(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    env = clean_environ({"PYTHONPATH": str(ROOT)})
    env.pop("DDPNET_TEST_PROFILE", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.profiling",
                           "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not list(tmp_path.rglob("*.jsonl"))


def _item(nodeid: str) -> Any:
    return SimpleNamespace(nodeid=nodeid)


def test_modules_go_longest_first_and_keep_their_tests_in_order() -> None:
    items = [_item(n) for n in ("a.py::x", "a.py::y", "b.py::x", "new.py::x", "c.py::x",
                                "c.py::y")]
    costs = {"a.py": 3.0, "b.py": 40.0, "c.py": 12.0}
    got = [it.nodeid for it in longest_first(items, costs)]
    assert got == ["b.py::x", "c.py::x", "c.py::y", "a.py::x", "a.py::y", "new.py::x"]


def _marked(nodeid: str, slow: bool) -> Any:
    return SimpleNamespace(nodeid=nodeid, iter_markers=lambda name: iter(()),
                           get_closest_marker=lambda name: (slow and name == "slow") or None)


def test_a_module_with_no_record_is_costed_as_its_tests() -> None:
    """A new lab module (its tests marked slow) costs the median recorded slow test per test,
    so it starts among the long ones; a new quick one costs 0 and goes last."""
    items = [_marked("old.py::a", True), _marked("old.py::b", True),
             _marked("lab.py::x", True), _marked("lab.py::y", True), _marked("lab.py::z", True),
             _marked("half.py::known", False), _marked("half.py::new", True),
             _marked("unit.py::u", False)]
    tests = {"old.py::a": 10.0, "old.py::b": 30.0, "half.py::known": 4.0}
    costs = module_costs(items, {"old.py": 41.0}, tests)
    assert costs == {"old.py": 41.0, "lab.py": 60.0, "half.py": 24.0, "unit.py": 0.0}
    order = [it.nodeid.split("::")[0] for it in longest_first(items, costs)]
    assert list(dict.fromkeys(order)) == ["lab.py", "old.py", "half.py", "unit.py"]


def test_recorded_costs_read_the_durations_file_or_nothing(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"modules": [{"module": "a.py", "wall_s": 2.5}],
                                "all": [{"test": "a.py::x", "wall_s": 0.5}]}))
    assert recorded_costs("modules", "module", path) == {"a.py": 2.5}
    assert recorded_costs("all", "test", path) == {"a.py::x": 0.5}
    assert recorded_costs("all", "test", tmp_path / "none.json") == {}
    path.write_text("{not json")
    assert recorded_costs("modules", "module", path) == {}


def test_fast_leaves_out_labs_slurm_and_marked_tests_and_keeps_pure_ones() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--fast", "--co", "-q", "-p", "no:cacheprovider",
         "tests/lab/test_topology.py", "tests/check/test_lab.py",
         "tests/launch/test_slurm_requeue.py", "tests/bench/test_lab.py"],
        cwd=ROOT, env=clean_environ(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kept = [line for line in proc.stdout.splitlines() if "::" in line]
    assert kept and all(line.startswith("tests/lab/test_topology.py::") for line in kept), kept
    assert "deselected" in proc.stdout
    if os.geteuid() == 0:  # without root the lab modules skip anyway; with it they are out
        assert not any("test_lab.py" in line for line in kept)


def test_the_parallel_run_hands_out_modules_in_the_collected_order(tmp_path: Path) -> None:
    """xdist's loadfile reorders modules by their number of tests unless told not to: the
    long lab modules (few tests each) then started last and ran alone at the end. With the
    Makefile's flags, a one-test module collected first runs first."""
    line = next(raw for raw in (ROOT / "Makefile").read_text().splitlines()
                if "--dist loadfile" in raw)
    flags = [f for f in line.split() if f.startswith("--") and "loadscope" in f]
    assert flags == ["--no-loadscope-reorder"], line
    (tmp_path / "test_a_first.py").write_text(
        "import os\ndef test_one():\n    open(os.environ['ORDER'], 'a').write('a\\n')\n")
    (tmp_path / "test_b_more.py").write_text(
        "import os\n" + "".join(
            f"def test_{i}():\n    open(os.environ['ORDER'], 'a').write('b\\n')\n"
            for i in range(3)))
    order = tmp_path / "order"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-n", "1", "--dist", "loadfile", *flags, str(tmp_path)],
                          env={**clean_environ(), "ORDER": str(order)}, capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert order.read_text().split() == ["a", "b", "b", "b"]
