"""Every script in benchmarks/ keeps working (issue 56): ``scale_sim.py --command watch``
failed with ``ImportError: cannot import name 'start_hub'`` (a lazy import inside the rank
0 path, which no test reached) long after the name left ``watch.session``.

- every name a script imports from ddpnet or tests (at any depth, and in the worker code it
  carries as strings) exists: fast, no root, in ``make test-fast``;
- every Python script answers ``--help`` and every shell script parses;
- the scripts that need neither root nor a lab run at their smallest size into a temporary
  file; the lab ones at theirs where this host can build a lab (root, namespaces).
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lab_util import requires_netns

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
PYTHON_SCRIPTS = sorted(p.name for p in BENCH.glob("*.py"))
SHELL_SCRIPTS = sorted(p.name for p in BENCH.glob("*.sh"))


def _trees(path: Path) -> list[ast.AST]:
    """The script's syntax tree and those of the Python code it holds in strings (worker
    code it writes out or passes to ``python -c``)."""
    tree = ast.parse(path.read_text())
    out: list[ast.AST] = [tree]
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                "import " in node.value and "\n" in node.value:
            try:
                out.append(ast.parse(node.value))
            except SyntaxError:  # prose, a shell script, a template with holes
                continue
    return out


def imported_names(path: Path) -> list[tuple[str, str]]:
    """(module, name) for each ``from ddpnet...|tests... import name`` in the script, and
    (module, "") for each ``import ddpnet...`` (pure)."""
    found = []
    for tree in _trees(path):
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                    node.module.split(".")[0] in ("ddpnet", "tests"):
                found += [(node.module, alias.name) for alias in node.names]
            elif isinstance(node, ast.Import):
                found += [(alias.name, "") for alias in node.names
                          if alias.name.split(".")[0] == "ddpnet"]
    return found


@pytest.mark.parametrize("script", PYTHON_SCRIPTS)
def test_every_name_a_script_imports_from_ddpnet_exists(script: str) -> None:
    missing = []
    for module_name, name in imported_names(BENCH / script):
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            missing.append(f"{module_name}: {exc}")
            continue
        if name and name != "*" and not hasattr(module, name):
            try:
                importlib.import_module(f"{module_name}.{name}")
            except ImportError:
                missing.append(f"cannot import name {name!r} from {module_name}")
    assert not missing, f"{script}: " + "; ".join(missing)


def test_the_import_check_sees_a_lazy_import_of_a_name_gone(tmp_path: Path) -> None:
    """The check reads imports inside functions and in code held in strings."""
    script = tmp_path / "x.py"
    script.write_text('def f():\n    from ddpnet.watch.session import start_hub\n'
                      'WORKER = """\nimport os\nfrom ddpnet.bench import run\n"""\n')
    assert imported_names(script) == [("ddpnet.watch.session", "start_hub"),
                                      ("ddpnet.bench", "run")]
    assert not hasattr(importlib.import_module("ddpnet.watch.session"), "start_hub")


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.mark.parametrize("script", PYTHON_SCRIPTS)
def test_every_python_script_answers_help(script: str) -> None:
    done = _run([sys.executable, str(BENCH / script), "--help"], 120)
    assert done.returncode == 0 and "usage" in done.stdout.lower(), done.stderr[-2000:]


@pytest.mark.parametrize("script", SHELL_SCRIPTS)
def test_every_shell_script_parses(script: str) -> None:
    done = subprocess.run(["bash", "-n", str(BENCH / script)], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr


# -- at their smallest size --------------------------------------------------------------------

#: the scripts that need no root and no lab, each at its smallest size (OUT: a temporary
#: file it writes instead of benchmarks/results/)
SMALLEST = {
    "networks_plan.py": ["--sizes", "4", "--out", "OUT"],
}

#: the ones that build a lab where they can (root, namespaces): slow, outside ``make
#: test-fast``; those that print their point as JSON instead of writing OUT say so (None)
SMALLEST_LAB: dict[str, tuple[list[str], str | None]] = {
    "doctor_speed.py": (["--runs", "1", "--out", "OUT"], "OUT"),
    "probe_share.py": (["--nodes", "2", "--every", "5", "--seconds", "12", "--out", "OUT"],
                       "OUT"),
    "scale_sim.py": (["--command", "watch", "--ranks", "64", "--json"], None),
}


def _argv(script: str, args: list[str], out: Path) -> list[str]:
    return [sys.executable, str(BENCH / script), *[str(out) if a == "OUT" else a
                                                   for a in args]]


@pytest.mark.parametrize("script", sorted(SMALLEST))
def test_a_script_runs_at_its_smallest_size(script: str, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    done = _run(_argv(script, SMALLEST[script], out), 240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(out.read_text())


@requires_netns
@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(SMALLEST_LAB))
def test_a_lab_script_runs_at_its_smallest_size(script: str, tmp_path: Path) -> None:
    args, writes = SMALLEST_LAB[script]
    out = tmp_path / "out.json"
    done = _run(_argv(script, args, out), 280)
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    if writes:
        assert json.loads(out.read_text())
        return
    point = json.loads(done.stdout.strip().splitlines()[-1])
    assert point["verdict"] and point["faulty_host_named"], point
