"""ddpnet/watch/boot/sitecustomize.py: with the boot directory on PYTHONPATH and
DDPNET_WATCH_ATTACH=1 an interpreter installs the hook and still runs the sitecustomize it
shadows; without the variable it imports nothing of ddpnet; start-up stays cheap."""

from __future__ import annotations

import importlib.util
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from ddpnet.watch.attach import ATTACH_VAR, BOOT_DIR, python_path

_PROBE = ("import sys\n"
          "print('finder', any(type(f).__name__ == '_Finder' for f in sys.meta_path))\n"
          "print('ddpnet', 'ddpnet' in sys.modules, 'torch', 'torch' in sys.modules)\n")


def test_later_paths_leave_out_the_boot_dir_only() -> None:
    spec = importlib.util.spec_from_file_location(
        "boot_probe", os.path.join(BOOT_DIR, "sitecustomize.py"))
    assert spec is not None and spec.loader is not None
    boot = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(boot)  # not named sitecustomize: defines, runs nothing
    assert boot.later_paths([BOOT_DIR, "/u", BOOT_DIR + "/", "", "/v"], BOOT_DIR) == [
        "/u", "", "/v"]


def _run(tmp_path: Path, **env: str) -> str:
    user = tmp_path / "user"
    user.mkdir(exist_ok=True)
    (user / "sitecustomize.py").write_text("print('user sitecustomize ran')\n")
    base = {k: v for k, v in os.environ.items() if k != ATTACH_VAR}
    pythonpath = python_path({"PYTHONPATH": f"{user}{os.pathsep}{base.get('PYTHONPATH', '')}"})
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                          env={**base, "PYTHONPATH": pythonpath, **env}, timeout=120,
                          check=True)
    assert done.stderr == "", done.stderr
    return done.stdout


def test_the_variable_installs_the_hook_and_chains(tmp_path: Path) -> None:
    out = _run(tmp_path, **{ATTACH_VAR: "1"})
    assert out.splitlines() == ["user sitecustomize ran", "finder True",
                                "ddpnet True torch False"]


def test_without_the_variable_nothing_of_ddpnet_loads(tmp_path: Path) -> None:
    out = _run(tmp_path)
    assert out.splitlines() == ["user sitecustomize ran", "finder False",
                                "ddpnet False torch False"]


def _start_cpu(env: dict[str, str]) -> float:
    """CPU seconds (user + system) of one ``python -c pass`` under ``env``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", "pass"], capture_output=True, env=env, timeout=120,
                   check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def test_the_hook_adds_well_under_half_a_second_to_start_up(tmp_path: Path) -> None:
    """The hook's whole cost at start-up, as CPU time (a busy machine stretches wall time,
    not CPU time: -X importtime's wall clock read 0.72 s at a load of 40 for a hook that
    costs 0.05 s): the least of three interpreter starts with the variable, less the least of
    three without. Importing torch in the hook would add more than a second."""
    base = {k: v for k, v in os.environ.items() if k != ATTACH_VAR}
    on = {**base, ATTACH_VAR: "1",
          "PYTHONPATH": python_path({"PYTHONPATH": base.get("PYTHONPATH", "")})}
    added = min(_start_cpu(on) for _ in range(3)) - min(_start_cpu(base) for _ in range(3))
    assert added < 0.5, added


def test_the_env_line_of_python_m_ddpnet_attach_turns_it_on(tmp_path: Path) -> None:
    """``eval "$(python -m ddpnet.attach --env)"``: what docs/watch.md gives a launcher of
    its own."""
    base = {k: v for k, v in os.environ.items() if k != ATTACH_VAR}
    line = f'eval "$("{sys.executable}" -m ddpnet.attach --env)"; exec "{sys.executable}" -c "$0"'
    done = subprocess.run(["bash", "-c", line, _PROBE], capture_output=True, text=True,
                          env=base, timeout=120, check=True)
    assert done.stdout.splitlines() == ["finder True", "ddpnet True torch False"], done.stderr


def test_a_python_without_ddpnet_under_the_ranks_environment_prints_nothing(
        tmp_path: Path) -> None:
    """A system Python a rank's script starts inherits PYTHONPATH and the variable: it
    printed "the watch is off: ModuleNotFoundError" on every start."""
    base = getattr(sys, "_base_executable", "") or "/usr/bin/python3"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "VIRTUAL_ENV")}
    env.update({ATTACH_VAR: "1", "PYTHONPATH": python_path({})})
    if subprocess.run([base, "-c", "import ddpnet"], env={**env, "PYTHONPATH": ""},
                      capture_output=True, timeout=120, check=False).returncode == 0:
        pytest.skip(f"{base} imports ddpnet: no interpreter without it here")
    done = subprocess.run([base, "-c", "print('ran')"], env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    assert (done.stdout, done.stderr) == ("ran\n", "")
