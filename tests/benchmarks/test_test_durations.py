"""benchmarks/test_durations.py: profile lines summed per test and module, and what each
test's time went on."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("test_durations_script",
                                                  ROOT / "benchmarks/test_durations.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _line(test: str, phase: str, wall: float, **kw: float) -> str:
    return json.dumps({"test": test, "phase": phase, "wall_s": wall, "cpu_s": 0.01,
                       "children_cpu_s": 0.0, **kw})


def test_phases_sum_per_test_and_modules_and_name_the_largest_part(tmp_path: Path) -> None:
    td = _module()
    (tmp_path / "gw0.jsonl").write_text("\n".join([
        _line("tests/a.py::lab", "setup", 2.0, lab_s=1.8),
        _line("tests/a.py::lab", "call", 10.0, sleep_s=9.0),
        _line("tests/a.py::lab", "teardown", 1.0, lab_s=0.9),
        _line("tests/a.py::ranks", "call", 6.0, children_cpu_s=5.0, wait_s=0.5),
    ]) + "\n")
    (tmp_path / "gw1.jsonl").write_text(_line("tests/b.py::waits", "call", 8.0) + "\n")
    s = td.summarise(td.read_lines(tmp_path))
    rows = {r["test"]: r for r in s["all"]}
    assert rows["tests/a.py::lab"]["wall_s"] == 13.0
    slowest = {r["test"]: r for r in s["slowest"]}
    assert slowest["tests/a.py::lab"]["lab_s"] == 2.7
    assert slowest["tests/a.py::lab"]["spent_on"] == "sleep"
    assert slowest["tests/a.py::ranks"]["spent_on"] == "processes it started (cpu)"
    assert slowest["tests/b.py::waits"]["spent_on"] == "waiting"
    assert slowest["tests/b.py::waits"]["worker"] == "gw1"
    assert [m["module"] for m in s["modules"]] == ["tests/a.py", "tests/b.py"]
    assert s["modules"][0]["wall_s"] == 19.0 and s["modules"][0]["tests"] == 2
    assert s["sum_of_test_wall_s"] == 27.0
