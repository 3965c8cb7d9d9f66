"""Elastic restart: under ``ddpnet launch --max-restarts`` (torchrun's elastic agent), a worker
killed by SIGKILL mid-run is restarted with the whole group, which resumes from the newest
checkpoint and finishes with the same step count, repeating at most --checkpoint-every steps.

``ddpnet launch --max-restarts`` uses c10d rendezvous with a fresh store per round: with
torchrun's static rendezvous a restarted group can read the previous attempt's peer addresses
from the shared store and hang in gloo's full-mesh connect (pytorch#135712). ``--pg-timeout``
still bounds any such hang so the test cannot block CI."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import clean_environ

pytestmark = pytest.mark.slow

STEPS, EVERY = 60, 10


def _workers(launcher: psutil.Process) -> list[psutil.Process]:
    """The training workers: children running ddpnet train, not the torchrun agent nor the
    watch's hub."""
    return [p for p in launcher.children(recursive=True)
            if "ddpnet" in " ".join(p.cmdline()) and p.pid != launcher.pid
            and "ddpnet.launch.torchrun_main" not in p.cmdline()
            and "ddpnet.watch.hub" not in p.cmdline()]  # rank 0's watch hub


def test_killed_worker_is_restarted_and_the_run_completes(tmp_path: Path) -> None:
    ckpts = tmp_path / "ckpt"
    with socket.socket() as probe:  # a free port for this test's rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = [sys.executable, "-m", "ddpnet", "launch", "--nproc-per-node", "2",
            "--max-restarts", "2", "--master-port", str(port), "--",
            "-m", "ddpnet", "train", "--model", "mlp", "--width", "16", "--samples", "4096",
            "--batch-size", "16", "--max-steps", str(STEPS), "--log-every", "20",
            "--checkpoint-dir", str(ckpts), "--checkpoint-every", str(EVERY),
            "--step-sleep", "0.1", "--pg-timeout", "30", "--json"]
    env = clean_environ({"OMP_NUM_THREADS": "1"})
    # own session: on failure the whole tree (agent and workers) is killed, no orphans
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        launcher = psutil.Process(proc.pid)
        deadline = time.monotonic() + 120
        while not list(ckpts.glob("ckpt-00000020.pt")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no checkpoint within 120 s"
            time.sleep(0.05)
        victims = _workers(launcher)
        assert len(victims) == 2, [p.cmdline() for p in victims]
        killed_at = max(int(p.name[5:13]) for p in ckpts.glob("ckpt-*.pt"))
        victims[1].send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=240)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == 0, err[-3000:]
    # rank 0's summary, on its line under launch's "[rank 0] " prefix
    (summary,) = [json.loads(line.removeprefix("[rank 0] ")) for line in out.splitlines()
                  if line.startswith("[rank 0] {")]
    assert summary["steps"] == STEPS
    assert summary["resumed_from"] is not None
    # resumed from a checkpoint no older than the newest one when the worker died
    assert summary["resumed_from"] >= killed_at
    assert killed_at < STEPS, "the kill came after the run had finished"
    assert "SIGKILL" in err or "Signal 9" in err or "exitcode" in err.lower()
