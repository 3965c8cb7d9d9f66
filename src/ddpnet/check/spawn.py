"""``--local N``: N ranks on this machine over loopback; rank 0 runs in this process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence

_LAUNCHER_PREFIXES = ("SLURM_", "OMPI_", "PMI_", "PMIX_", "MV2_", "LSB_", "JSM_",
                      "TORCHELASTIC_")
_LAUNCHER_VARS = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                  "MASTER_PORT", "GROUP_RANK", "NODE_RANK", "NNODES", "GLOO_SOCKET_IFNAME",
                  "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME"}


def local_environ(base: Mapping[str, str], rank: int, world: int, port: int) -> dict[str, str]:
    """``base`` without any launcher's variables, plus a manual launch on loopback (pure)."""
    env = {k: v for k, v in base.items()
           if k not in _LAUNCHER_VARS and not k.startswith(_LAUNCHER_PREFIXES)}
    env.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo"})
    return env


def spawn_workers(world: int, port: int, args: Sequence[str]) -> list[subprocess.Popen[str]]:
    """Start ranks 1..N-1 as ``python -m ddpnet check ARGS`` (their output is collected)."""
    procs = []
    for rank in range(1, world):
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "ddpnet", "check", *args],
            env=local_environ(os.environ, rank, world, port), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, start_new_session=True,
        ))
    return procs


def reap(procs: Sequence[subprocess.Popen[str]], timeout: float) -> list[tuple[int, str, str]]:
    """Wait for the workers (bounded), kill stragglers; returns (returncode, stdout, stderr)."""
    out = []
    for p in procs:
        try:
            stdout, stderr = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            stdout, stderr = p.communicate()
        out.append((p.returncode, stdout or "", stderr or ""))
    return out
