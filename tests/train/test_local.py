"""``ddpnet train --local N`` runs through the one spawner (``ddpnet.local.LocalRanks``):
N is bounded before anything starts, and SIGTERM to the parent ends every rank (issue 17:
``train --local 100000`` spawned until a timeout; SIGTERM left both ranks running)."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ddpnet.train.config import TrainConfig
from ddpnet.train.run import worker_argv
from tests.conftest import RunCli, assert_user_error, clean_environ


@pytest.mark.parametrize("n", ["100000", "65"])
def test_too_many_local_ranks_is_a_usage_error_before_any_spawn(run_cli: RunCli,
                                                                 n: str) -> None:
    started = time.monotonic()
    proc = run_cli("train", "--local", n, "--json", timeout=60)
    assert_user_error(proc, 2, f"--local {n}", "64")
    assert len([line for line in proc.stderr.splitlines() if line.strip()]) == 2
    assert time.monotonic() - started < 30  # no rank was started (each imports torch)


def test_worker_argv_carries_the_config_and_json() -> None:
    argv = worker_argv(TrainConfig(width=7), as_json=True)
    assert argv[:3] == [sys.executable, "-m", "ddpnet.train"] and argv[-1] == "--json"
    assert json.loads(argv[3])["width"] == 7
    assert "--json" not in worker_argv(TrainConfig(), as_json=False)


def _ranks(parent: psutil.Process) -> list[psutil.Process]:
    return [p for p in parent.children(recursive=True)
            if "ddpnet.train" in " ".join(p.cmdline())]


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_parent_stops_every_rank(signum: int, tmp_path: Path) -> None:
    """SIGTERM (a scheduler) or SIGINT (Ctrl-C) reaches every rank, none is left behind,
    the parent exits 128+N, and no rank prints a traceback."""
    argv = [sys.executable, "-m", "ddpnet", "train", "--local", "2", "--samples", "4096",
            "--batch-size", "16", "--epochs", "50", "--log-every", "1",
            "--step-sleep", "0.05"]
    err = (tmp_path / "stderr").open("w+")
    proc = subprocess.Popen(argv, env=clean_environ({"OMP_NUM_THREADS": "1"}),
                            stdout=subprocess.PIPE, stderr=err, text=True,
                            start_new_session=True)
    ranks: list[psutil.Process] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # rank 0's output is the parent's: wait until it trains
            if line.startswith("step "):
                break
        else:
            pytest.fail(f"no step line; exit {proc.wait()}")
        ranks = _ranks(psutil.Process(proc.pid))
        assert len(ranks) == 2, [p.cmdline() for p in ranks]
        proc.send_signal(signum)
        code = proc.wait(timeout=15)
        _gone, alive = psutil.wait_procs(ranks, timeout=3)
        assert not alive, [p.cmdline() for p in alive]  # no orphans
        assert code == 128 + signum  # the forwarded signal, as a shell reports it
        err.seek(0)
        assert "Traceback" not in err.read()
    finally:
        for p in ranks:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()
        err.close()
