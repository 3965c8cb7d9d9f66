"""``ddpnet train --local N``: N ranks on this machine, without torchrun.

The parent picks a free loopback port, starts N workers (``python -m ddpnet.train``) with the
variables a launcher would export, streams rank 0's output, and stops the rest as soon as one
fails, returning the first failure's exit code.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping

from ddpnet.net.ports import free_port

#: launcher variables that must not leak into the workers (they would win detection)
_LAUNCHER_PREFIXES = ("SLURM_", "OMPI_", "PMI_", "PMIX_", "MPI_", "MV2_", "LSB_", "JSM_",
                      "TORCHELASTIC_")
_TORCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
               "MASTER_PORT", "GROUP_RANK", "NODE_RANK", "NNODES")


def worker_env(base: Mapping[str, str], *, rank: int, world_size: int, port: int,
               cpus: int) -> dict[str, str]:
    """The environment of local rank ``rank`` (pure)."""
    env = {k: v for k, v in base.items()
           if k not in _TORCH_VARS and not k.startswith(_LAUNCHER_PREFIXES)}
    env.update({
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
        "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(world_size), "NODE_RANK": "0", "NNODES": "1",
    })
    # N ranks each using every core would thrash; torchrun makes the same choice
    env.setdefault("OMP_NUM_THREADS", str(max(1, cpus // world_size)))
    return env


def run_local(n: int, config_json: str, *, as_json: bool, timeout: float | None = None) -> int:
    """Run ``n`` workers to completion; the first non-zero exit stops the others."""
    port = free_port()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    procs = []
    for rank in range(n):
        argv = [sys.executable, "-m", "ddpnet.train", config_json]
        if as_json:
            argv.append("--json")
        env = worker_env(os.environ, rank=rank, world_size=n, port=port, cpus=cpus or 1)
        procs.append(subprocess.Popen(
            argv, env=env, stdout=None if rank == 0 else subprocess.DEVNULL))
    deadline = None if timeout is None else time.monotonic() + timeout
    failed: int | None = None
    try:
        while any(p.poll() is None for p in procs):
            for p in procs:
                code = p.poll()
                if code not in (None, 0) and failed is None:
                    failed = code
            if failed is not None or (deadline is not None and time.monotonic() > deadline):
                break
            time.sleep(0.05)
    finally:
        _stop(procs)
    if failed is None:
        failed = next((p.returncode for p in procs if p.returncode), 0)
    return 128 + (-failed) if failed < 0 else failed


def _stop(procs: list[subprocess.Popen[bytes]], grace: float = 5.0) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    end = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
