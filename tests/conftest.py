"""Shared fixtures: run the real CLI in a subprocess with a controlled environment."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping

import pytest

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


def assert_user_error(proc: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    """One ``ddpnet: error:`` line, a ``hint:`` line, the exit code, and no traceback."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines and lines[0].startswith("ddpnet: error: "), proc.stderr
    assert any(line.startswith("hint: ") for line in lines), proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, (needle, proc.stderr)
