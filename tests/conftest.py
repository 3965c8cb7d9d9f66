"""Shared fixtures: run the real CLI in a subprocess with a controlled environment."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

#: ``DDPNET_TEST_PROFILE=DIR``: where each test's time goes (benchmarks/test_durations.py)
pytest_plugins = ["tests.profiling"]

#: variables that would leak a launcher from the test runner's own environment
_LAUNCHER_PREFIXES = ("SLURM_", "OMPI_", "PMI_", "PMIX_", "MPI_", "MV2_", "LSB_", "JSM_",
                      "TORCHELASTIC_", "PET_", "PBS_", "SGE_", "SM_", "AZ_BATCH")
_LAUNCHER_VARS = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                  "MASTER_PORT", "GROUP_RANK", "NODE_RANK", "NNODES", "GLOO_SOCKET_IFNAME",
                  "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "JOB_COMPLETION_INDEX", "JOB_INDEX",
                  "JOBSET_NAME", "REPLICATED_JOB_NAME", "JOB_ID", "PE_HOSTFILE", "NSLOTS"}


def clean_environ(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without launcher variables, plus ``extra``."""
    env = {
        k: v for k, v in os.environ.items()
        if k not in _LAUNCHER_VARS and not k.startswith(_LAUNCHER_PREFIXES)
    }
    env.update(extra or {})
    return env


@pytest.fixture(scope="session", autouse=True)
def _watch_dumps_in_a_temp_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every job a test starts without its own DDPNET_WATCH_DIR dumps its watch states under
    pytest's temp dir, not ``./ddpnet-watch`` in the checkout (tests leave no files behind)."""
    old = os.environ.get("DDPNET_WATCH_DIR")
    os.environ["DDPNET_WATCH_DIR"] = str(tmp_path_factory.mktemp("ddpnet-watch"))
    yield
    if old is None:
        os.environ.pop("DDPNET_WATCH_DIR", None)
    else:
        os.environ["DDPNET_WATCH_DIR"] = old


RunCli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def run_cli() -> RunCli:
    """``run_cli("env", "--json", env={...})`` runs ``python -m ddpnet`` for real."""

    def _run(*args: str, env: Mapping[str, str] | None = None, timeout: float = 60,
             input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ddpnet", *args],
            env=clean_environ(env), capture_output=True, text=True, timeout=timeout,
            input=input,
        )

    return _run


#: run a command as user nobody (65534), as root
AS_NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")


def nobody_cannot_run() -> str | None:
    """Why user nobody cannot run this checkout's interpreter, import ddpnet and start a
    child (a clone in a mode-700 directory, a venv under /root), or None: a test that runs a
    command as nobody skips with it."""
    probe = subprocess.run(
        [*AS_NOBODY, sys.executable, "-c", "import subprocess, sys, ddpnet; "
         "subprocess.run([sys.executable, '-c', '0'], check=True)"],
        env=clean_environ(), capture_output=True, text=True, timeout=60, cwd="/")
    if probe.returncode == 0:
        return None
    last = (probe.stderr.strip().splitlines() or ["?"])[-1]
    return f"this checkout is not usable by user nobody here ({last[:200]})"


def assert_user_error(proc: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    """One ``ddpnet: error:`` line, a ``hint:`` line, the exit code, and no traceback."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines and lines[0].startswith("ddpnet: error: "), proc.stderr
    assert any(line.startswith("hint: ") for line in lines), proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, (needle, proc.stderr)


#: the recorded cost of each test module (benchmarks/test_durations.py writes it)
_DURATIONS = Path(__file__).resolve().parent.parent / "benchmarks/results/test_durations.json"


def recorded_costs(key: str, name: str, path: Path = _DURATIONS) -> dict[str, float]:
    """Wall seconds by module (``"modules"``, ``"module"``) or by test (``"all"``,
    ``"test"``) in the last recorded run; {} when there is none."""
    try:
        rows = json.loads(path.read_text())[key]
        return {row[name]: float(row["wall_s"]) for row in rows}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


def module_costs(items: list[pytest.Item], modules: Mapping[str, float],
                 tests: Mapping[str, float]) -> dict[str, float]:
    """Each module's recorded cost; one with no record yet is costed as its tests: each
    test's own record, else the median recorded test that needs the machine as it does (a
    new lab module of ten runs went last, and ran alone at the end of the run), else 0."""
    heavy = [tests[it.nodeid] for it in items
             if it.nodeid in tests and _needs_the_machine(it)]
    guess = statistics.median(heavy) if heavy else 0.0
    costs = dict(modules)
    for it in items:
        name = _module(it)
        if name not in modules:
            own = tests.get(it.nodeid, guess if _needs_the_machine(it) else 0.0)
            costs[name] = costs.get(name, 0.0) + own
    return costs


def longest_first(items: list[pytest.Item], costs: Mapping[str, float]) -> list[pytest.Item]:
    """Modules in falling cost (:func:`module_costs`), each module's tests in their own
    order: xdist (``--dist loadfile``) hands a free worker the next module, so the long ones
    start first and no long module is left to run alone at the end."""
    module = _module
    order: dict[str, int] = {}
    for item in items:
        order.setdefault(module(item), len(order))
    return sorted(items, key=lambda it: (-costs.get(module(it), 0.0), order[module(it)]))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--fast"):
        took = recorded_costs("all", "test")
        slow = {it.nodeid for it in items
                if _needs_the_machine(it) or took.get(it.nodeid, 0.0) > FAST_TEST_S}
        config.hook.pytest_deselected(items=[it for it in items if it.nodeid in slow])
        items[:] = [it for it in items if it.nodeid not in slow]
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each worker collects; all in one order
        costs = module_costs(items, recorded_costs("modules", "module"),
                             recorded_costs("all", "test"))
        items[:] = longest_first(items, costs)


#: ``--fast`` leaves out a test that took longer in the recorded run (it starts ranks: a
#: Python with torch is ~2 s of CPU); a new test, with no record yet, stays in
FAST_TEST_S = 1.5


def pytest_configure(config: pytest.Config) -> None:
    """A runner started in the background (``cmd &`` without job control, nohup) inherits
    SIGINT ignored, and so would every process a test starts: the Ctrl-C tests (check, train,
    monitor, lab run, the store) then failed for the runner's reason, not the code's. Ctrl-C
    is a user's to send, so the suite delivers it as a terminal would."""
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--fast", action="store_true",
                     help="make test-fast, the inner loop: only tests that need no root, "
                          "namespace or daemon, are not marked slow or solo, and took at "
                          f"most {FAST_TEST_S} s in benchmarks/results/test_durations.json")


def _needs_the_machine(item: pytest.Item) -> bool:
    """Root, a network namespace, a daemon (SLURM), or a mark saying it is slow."""
    from tests.lab_util import requires_netns
    from tests.slurm_util import requires_slurm

    gates = (requires_netns.mark, requires_slurm.mark)
    return (any(item.get_closest_marker(name) for name in ("root", "slow", "solo"))
            or any(mark in gates for mark in item.iter_markers("skipif")))
