"""Multi-node on a real lab: torchrun launched once per node, and SLURM with one slurmd per
node namespace (``srun -N 3`` runs one task per lab node)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ddpnet.lab import Lab
from ddpnet.lab import slurm as labslurm
from tests.conftest import RunCli
from tests.lab_util import fresh_lab, requires_netns, unique_name
from tests.slurm_util import labeled_json, slurm_missing

pytestmark = requires_netns
SCRIPT = str(Path(__file__).with_name("allreduce_script.py"))


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with fresh_lab("ln", nodes=3) as lab:
        yield lab


def _results(text: str) -> list[dict[str, Any]]:
    return sorted((json.loads(m) for m in re.findall(r'\{"rank": [^{}]*\}', text)),
                  key=lambda o: int(o["rank"]))


def test_torchrun_one_launch_per_lab_node(lab: Lab) -> None:
    results = lab.run([sys.executable, "-m", "ddpnet", "launch", "--nproc-per-node", "2",
                       "--", SCRIPT], nodes=[0, 1], master_port=29641, timeout=240)
    for r in results:
        assert r.returncode == 0, (r.node.name, r.stderr[-3000:])
    objs = _results("".join(r.stdout for r in results))
    assert [o["rank"] for o in objs] == [0, 1, 2, 3]
    assert {o["world_size"] for o in objs} == {4}
    assert {o["sum"] for o in objs} == {10.0}
    assert {o["master"] for o in objs} == {f"{lab.master_addr}:29641"}
    # the interface selection toward MASTER_ADDR reached every rank
    assert {o["gloo_ifname"] for o in objs} == {lab.nodes[0].ifname}


@pytest.fixture(scope="module")
def slurm_lab(lab: Lab) -> Iterator[Lab]:
    reason = slurm_missing()
    if reason:
        pytest.skip(reason)
    labslurm.start(lab)
    try:
        yield lab
    finally:
        labslurm.stop(lab.name)


def test_srun_runs_one_task_per_lab_node(slurm_lab: Lab) -> None:
    lab = slurm_lab
    p = lab.exec(0, ["srun", "-N", "3", "-n", "3", "--label", sys.executable, "-m", "ddpnet",
                     "env", "--json"], env=labslurm.client_env(lab), timeout=120)
    assert p.returncode == 0, p.stderr
    objs = labeled_json(p.stdout)
    assert [o["rank"] for o in objs] == [0, 1, 2]
    assert [o["node_rank"] for o in objs] == [0, 1, 2]
    assert {o["launcher"] for o in objs} == {"slurm"}
    assert {o["num_nodes"] for o in objs} == {3}
    hosts = [n.hostname for n in lab.nodes]
    assert objs[0]["hosts"] == hosts
    assert {o["master_addr"] for o in objs} == {hosts[0]}


def test_srun_exec_all_reduce_across_lab_nodes(slurm_lab: Lab) -> None:
    lab = slurm_lab
    p = lab.exec(0, ["srun", "-N", "3", "--ntasks-per-node", "1", sys.executable, "-m",
                     "ddpnet", "exec", "--", SCRIPT], env=labslurm.client_env(lab),
                 timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    objs = _results(p.stdout)
    assert [o["rank"] for o in objs] == [0, 1, 2]
    assert {o["sum"] for o in objs} == {6.0}
    assert {o["launcher"] for o in objs} == {"slurm"}
    assert {o["gloo_ifname"] for o in objs} == {lab.nodes[0].ifname}


def test_lab_up_slurm_cli_and_down_stops_everything(run_cli: RunCli) -> None:
    reason = slurm_missing()
    if reason:
        pytest.skip(reason)
    name = unique_name("ln")
    up = run_cli("lab", "up", "--name", name, "--nodes", "3", "--slurm", timeout=120)
    try:
        assert up.returncode == 0, up.stderr
        wrapper = labslurm.client_wrapper(name)
        assert str(wrapper) in up.stdout
        p = subprocess.run([str(wrapper), "srun", "-N", "3", "hostname"], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        hostnames = sorted(p.stdout.split())
        assert len(set(hostnames)) == 3, hostnames
        root = str(labslurm.root_dir(name))
        assert _processes_naming(root)  # the daemons run
    finally:
        down = run_cli("lab", "down", "--name", name, timeout=120)
    assert down.returncode == 0, down.stderr
    assert not labslurm.root_dir(name).exists()
    assert _processes_naming(root) == []


def _processes_naming(text: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if text.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(int(pid))
            except OSError:
                pass
    return found
