"""A real SLURM for tests: munged (own key and socket), slurmctld and slurmd with their own
slurm.conf, ports and directories under a temp dir, all stopped afterwards.

``slurm_cluster`` is module-scoped (start-up is about 2 s); tests run clients with
``cluster.client(["srun", ...])``, which sets SLURM_CONF.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddpnet.launch.slurmcluster import ClusterSpec, SlurmCluster, SlurmNode
from ddpnet.net.ports import free_port

_TOOLS = ("munged", "slurmctld", "slurmd", "srun", "sbatch")


def slurm_missing() -> str | None:
    """Why a real SLURM cannot run here, or None."""
    import os

    missing = [t for t in _TOOLS if shutil.which(t) is None and not Path("/usr/sbin", t).exists()]
    if missing:
        return f"SLURM/munge not installed ({', '.join(missing)}): make system-deps"
    if os.geteuid() != 0:
        return "a private slurmd needs root"
    return None


requires_slurm = pytest.mark.skipif(slurm_missing() is not None,
                                    reason=slurm_missing() or "")


def start_local_cluster(cpus: int = 4, prefix: str = "ln-slurm-",
                        cred_expire_s: int | None = None) -> SlurmCluster:
    """One node (this host, by its own hostname so MASTER_ADDR resolves) on 127.0.0.1;
    ``cred_expire_s`` shortens how long a requeued job waits to start again (120 s)."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    root.chmod(0o755)
    host = socket.gethostname().split(".")[0]
    spec = ClusterSpec(
        cluster="ln" + root.name[-6:].lower().replace("_", "x"), root=root,
        controller_host=host, controller_addr="127.0.0.1",
        nodes=(SlurmNode(host, "127.0.0.1", host, cpus=cpus),),
        ctld_port=free_port(), slurmd_port=free_port(), cred_expire_s=cred_expire_s,
    )
    cluster = SlurmCluster(spec)
    cluster.start()
    return cluster


@pytest.fixture(scope="module")
def slurm_cluster() -> Iterator[SlurmCluster]:
    reason = slurm_missing()
    if reason:
        pytest.skip(reason)
    cluster = start_local_cluster()
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(cluster.spec.root, ignore_errors=True)


def labeled_json(stdout: str) -> list[dict[str, object]]:
    """``srun --label`` output of tasks printing JSON: lines of different tasks interleave,
    so group them by their ``N: `` label first. Sorted by task id. A piped ``--json`` is one
    line (JSON Lines), which srun's labelling cuts into 1024-byte pieces: those pieces join
    without a newline; pretty JSON (a terminal's) joins with one."""
    import json
    import re

    by_task: dict[int, list[str]] = {}
    for line in stdout.splitlines():
        m = re.match(r"\s*(\d+): ?(.*)$", line)
        if m:
            by_task.setdefault(int(m.group(1)), []).append(m.group(2))
    def parse(pieces: list[str]) -> dict[str, object]:
        try:
            return dict(json.loads("".join(pieces)))
        except json.JSONDecodeError:
            return dict(json.loads("\n".join(pieces)))

    return [parse(by_task[t]) for t in sorted(by_task)]
