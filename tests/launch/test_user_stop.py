"""A user's stop (kill, scancel, Ctrl-C: SIGTERM to what they started, no peer failed) of a
watched job started by ``ddpnet launch`` or ``ddpnet exec`` leaves no rank behind within
seconds (issue 56; ``train --local``: tests/train/test_local.py). The guard waited its whole
grace (10 s) for a verdict that never came; the hub now answers "no fault"."""

from __future__ import annotations

import contextlib
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from ddpnet.net.ports import free_port
from tests.conftest import clean_environ

#: how long two ranks may take to start on a loaded machine
STARTS_S = 120.0
#: the issue's 2 s, with room for a loaded 2-core machine (measured: 0.64 s under launch)
GONE_WITHIN_S = 5.0
SCRIPT = """
import os, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
print(f"pid {os.getpid()} rank {dist.get_rank()}", flush=True)
t = torch.ones(4)
while True:
    dist.all_reduce(t)
    time.sleep(0.02)
"""


def _starts(launcher: str, script: Path) -> list[list[str]]:
    ddpnet = [sys.executable, "-m", "ddpnet"]
    if launcher == "launch":
        return [[*ddpnet, "launch", "--local", "2", "--", str(script)]]
    return [[*ddpnet, "exec", "--", str(script)] for _ in range(2)]


def _env(launcher: str, rank: int, port: int) -> dict[str, str]:
    if launcher == "launch":
        return clean_environ({"OMP_NUM_THREADS": "1"})
    return clean_environ({"OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1",
                          "MASTER_PORT": str(port), "WORLD_SIZE": "2", "RANK": str(rank),
                          "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": "2"})


def _rank_processes(started: list[subprocess.Popen[str]]) -> list[psutil.Process]:
    """The two ranks, from their ``pid`` lines (launch prints both, each exec its own),
    read in threads: a job that never starts fails here within STARTS_S, never hangs."""
    found: queue.Queue[int] = queue.Queue()

    def read(proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if pid := re.search(r"pid (\d+) rank", line):
                found.put(int(pid.group(1)))

    for proc in started:
        threading.Thread(target=read, args=(proc,), daemon=True).start()
    try:
        return [psutil.Process(found.get(timeout=STARTS_S)) for _ in range(2)]
    except queue.Empty:
        pytest.fail(f"no two ranks within {STARTS_S} s: exits {[p.poll() for p in started]}")


@pytest.mark.slow  # two ranks of torch
@pytest.mark.parametrize("launcher", ["launch", "exec"])
def test_a_users_sigterm_leaves_no_rank(tmp_path: Path, launcher: str) -> None:
    script = tmp_path / "loop.py"
    script.write_text(SCRIPT)
    port = free_port()
    started = [subprocess.Popen(argv, env=_env(launcher, i, port), stdout=subprocess.PIPE,
                                stderr=(tmp_path / f"err{i}").open("w"), text=True,
                                start_new_session=True)
               for i, argv in enumerate(_starts(launcher, script))]
    ranks: list[psutil.Process] = []
    try:
        ranks = _rank_processes(started)
        assert len(ranks) == 2, ranks
        start = time.monotonic()
        for proc in started:
            proc.send_signal(signal.SIGTERM)
        gone, alive = psutil.wait_procs(ranks, timeout=GONE_WITHIN_S)
        assert not alive, f"ranks alive {time.monotonic() - start:.1f} s after the stop"
        # each ended by the signal, as unwatched, with no verdict (a watch exit would be 4);
        # an exec'd rank is our child: psutil reaped it, so its code is psutil's
        codes = [getattr(p, "returncode", None) for p in gone] if launcher == "exec" else \
            [proc.wait(timeout=30) for proc in started]
        assert codes == [-signal.SIGTERM if launcher == "exec" else 128 + signal.SIGTERM] * \
            len(started), codes
    finally:
        for rank in ranks:
            with contextlib.suppress(psutil.NoSuchProcess):
                rank.kill()
        for proc in started:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
