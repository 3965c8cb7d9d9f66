"""Kubeflow PyTorchJob pods (training-operator v1): the operator's exact variables."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from ddpnet.env.detect import detect_launcher
from ddpnet.env.pytorchjob import nproc_per_node
from ddpnet.env.resolve import resolve_config
from ddpnet.errors import ConfigError
from tests.conftest import RunCli, clean_environ
from tests.env.jsonstream import json_objects

#: a worker pod of a 1-master + 2-worker PyTorchJob ``mnist``, as kubeflow/training-operator
#: v1.9.0 sets it (pkg/controller.v1/pytorch/envvar.go setPodEnv, master.go): RANK is the
#: pod's index (worker i -> i+1), WORLD_SIZE replicas x nprocPerNode (``auto`` counts 1),
#: MASTER_ADDR the master pod's service, the port its ``pytorchjob-port``
WORKER_1 = {
    "PYTHONUNBUFFERED": "1",
    "MASTER_PORT": "23456", "PET_MASTER_PORT": "23456",
    "MASTER_ADDR": "mnist-master-0", "PET_MASTER_ADDR": "mnist-master-0",
    "WORLD_SIZE": "3", "RANK": "2", "PET_NODE_RANK": "2",
    "PET_NPROC_PER_NODE": "auto", "PET_NNODES": "3",
}
#: a worker of a PyTorchJob with elasticPolicy and no Master (elastic.go): only PET_*
ELASTIC = {
    "PYTHONUNBUFFERED": "1", "PET_NPROC_PER_NODE": "auto", "PET_RDZV_BACKEND": "c10d",
    "PET_NNODES": "1:4", "PET_MAX_RESTARTS": "3", "PET_RDZV_ENDPOINT": "elastic-worker-0:23456",
}


def test_worker_pod_resolves_as_pytorchjob_with_operator_sources() -> None:
    cfg = resolve_config(WORKER_1, {})
    assert (cfg.launcher, cfg.rank, cfg.world_size, cfg.node_rank, cfg.num_nodes) == (
        "pytorchjob", 2, 3, 2, 3)
    assert (cfg.local_rank, cfg.local_world_size) == (0, 1)
    assert (cfg.master_addr, cfg.master_port) == ("mnist-master-0", 23456)
    assert cfg.sources["rank"] == "RANK" and cfg.sources["num_nodes"] == "PET_NNODES"
    assert not cfg.ambiguous
    assert not any("agrees" in n for n in cfg.notes)  # RANK is the operator's own


def test_hand_exported_rank_is_manual_not_pytorchjob() -> None:
    manual = {k: WORKER_1[k] for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    assert detect_launcher(manual)[0].name == "manual"
    assert detect_launcher(WORKER_1)[0].name == "pytorchjob"


def test_pet_master_is_used_when_master_addr_is_absent() -> None:
    env = {k: v for k, v in WORKER_1.items() if k not in ("MASTER_ADDR", "MASTER_PORT")}
    cfg = resolve_config(env, {})
    assert (cfg.sources["master_addr"], cfg.sources["master_port"]) == (
        "PET_MASTER_ADDR", "PET_MASTER_PORT")


def test_several_processes_per_pod_count_as_one_per_pod_with_a_note() -> None:
    # nprocPerNode 4: the operator's WORLD_SIZE (12) counts torchrun's processes; a process
    # started directly is rank PET_NODE_RANK of the PET_NNODES pods, and a note says why
    cfg = resolve_config({**WORKER_1, "PET_NPROC_PER_NODE": "4", "WORLD_SIZE": "12"}, {})
    assert (cfg.rank, cfg.world_size, cfg.node_rank, cfg.num_nodes) == (2, 3, 2, 3)
    assert cfg.sources["world_size"] == "PET_NNODES"
    assert any("PET_NPROC_PER_NODE=4" in n and "torchrun" in n for n in cfg.notes)


def test_ddpnet_launch_in_a_multi_process_pod_runs_torchrun_with_the_pod_facts(
        run_cli: RunCli) -> None:
    env = {**WORKER_1, "PET_NPROC_PER_NODE": "4", "WORLD_SIZE": "12"}
    proc = run_cli("launch", "--dry-run", "--json", "--nproc-per-node", "4", "--", "train.py",
                   env=env)
    assert proc.returncode == 0, proc.stderr
    (node,) = json.loads(proc.stdout)["nodes"]
    assert node["node_rank"] == 2 and node["ranks"] == [8, 9, 10, 11]
    argv = node["argv"]
    assert argv[argv.index("--nnodes") + 1] == "3"
    assert argv[argv.index("--master-addr") + 1] == "mnist-master-0"
    assert argv[argv.index("--master-port") + 1] == "23456"


def test_elastic_job_needs_torchrun() -> None:
    assert detect_launcher(ELASTIC)[0].name == "pytorchjob"
    with pytest.raises(ConfigError) as info:
        resolve_config(ELASTIC, {})
    assert "elastic" in str(info.value) and "torchrun" in info.value.hint


def test_torchrun_inside_the_pod_wins_and_is_nested() -> None:
    env = {**WORKER_1, "TORCHELASTIC_RUN_ID": "mnist", "RANK": "5", "WORLD_SIZE": "6",
           "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "2",
           "GROUP_WORLD_SIZE": "3"}
    cfg = resolve_config(env, {})
    assert (cfg.launcher, cfg.rank, cfg.world_size, cfg.node_rank) == ("torchrun", 5, 6, 2)
    assert "wins over pytorchjob" in cfg.notes[0] and not cfg.ambiguous


@pytest.mark.parametrize(("value", "expected"), [("auto", None), ("gpu", None), ("2", 2)])
def test_nproc_per_node(value: str, expected: int | None) -> None:
    assert nproc_per_node({"PET_NPROC_PER_NODE": value}) == expected


def test_env_json_names_pytorchjob_and_its_sources(run_cli: RunCli) -> None:
    proc = run_cli("env", "--json", env=WORKER_1)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["launcher"] == "pytorchjob" and out["rank"] == 2
    assert out["sources"]["master_addr"] == "MASTER_ADDR" and out["ambiguous"] == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_real_torchrun_reads_the_operator_pet_variables() -> None:
    # what the PyTorchJob docs tell users to run in the pod: bare torchrun, which takes
    # --nnodes/--nproc-per-node/--master-addr/... from PET_*; its ranks resolve as torchrun
    port = _free_port()
    pod = {"PET_NNODES": "1", "PET_NPROC_PER_NODE": "2", "PET_NODE_RANK": "0",
           "PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": str(port),
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "0",
           "WORLD_SIZE": "2"}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "-m", "ddpnet", "env", "--json"],
        env=clean_environ(pod), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    objs = json_objects(proc.stdout)
    assert sorted(o["rank"] for o in objs) == [0, 1]
    assert {o["launcher"] for o in objs} == {"torchrun"}
    assert {o["master_port"] for o in objs} == {port}
