"""Real launchers start real processes that resolve themselves: mpirun and torchrun."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.conftest import clean_environ
from tests.env.jsonstream import json_objects


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="openmpi-bin not installed")
def test_mpirun_two_ranks_resolve_as_openmpi(tmp_path: object) -> None:
    proc = subprocess.run(
        ["mpirun", "-np", "2", "--allow-run-as-root", "--oversubscribe",
         "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo",
         "--mca", "oob_tcp_if_include", "lo",
         sys.executable, "-m", "ddpnet", "env", "--json"],
        env=clean_environ(), capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    objs = sorted(json_objects(proc.stdout), key=lambda o: int(str(o["rank"])))
    assert [o["rank"] for o in objs] == [0, 1]
    assert {o["launcher"] for o in objs} == {"openmpi"}
    assert {o["world_size"] for o in objs} == {2}
    assert objs[1]["sources"]["rank"] == "OMPI_COMM_WORLD_RANK"  # type: ignore[index]


def test_torchrun_two_ranks_resolve_as_torchrun() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "--master-port", "29611", "-m", "ddpnet", "env", "--json"],
        env=clean_environ(), capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    objs = sorted(json_objects(proc.stdout), key=lambda o: int(str(o["rank"])))
    assert [o["rank"] for o in objs] == [0, 1]
    assert {o["launcher"] for o in objs} == {"torchrun"}
    assert [o["local_rank"] for o in objs] == [0, 1]
    assert {o["master_port"] for o in objs} == {29611}
