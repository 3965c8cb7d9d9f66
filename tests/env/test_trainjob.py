"""Kubeflow TrainJob (Trainer v2) trainer pods with the torch runtime."""

from __future__ import annotations

import json

import pytest

from ddpnet.env.resolve import resolve_config
from ddpnet.errors import ConfigError
from tests.conftest import RunCli

#: pod 1 of TrainJob ``mnist`` with numNodes 2 on GPU nodes, as the Torch plugin sets it
#: (kubeflow/trainer pkg/runtime/framework/plugins/torch/torch.go, pkg/constants):
#: PET_NODE_RANK from the job-completion-index annotation, PET_MASTER_ADDR the first pod's
#: JobSet hostname, port 29500; Kubernetes adds JOB_COMPLETION_INDEX (an indexed Job)
NODE_1 = {
    "PET_NNODES": "2", "PET_NPROC_PER_NODE": "auto", "PET_NODE_RANK": "1",
    "PET_MASTER_ADDR": "mnist-node-0-0.mnist", "PET_MASTER_PORT": "29500",
    "JOB_COMPLETION_INDEX": "1",
}
#: the same pod from the early v2 releases (replicated job ``trainer-node``)
EARLY_V2 = {**NODE_1, "PET_MASTER_ADDR": "mnist-trainer-node-0-0.mnist"}


def test_trainer_pod_resolves_as_trainjob() -> None:
    cfg = resolve_config(NODE_1, {})
    assert (cfg.launcher, cfg.rank, cfg.world_size, cfg.node_rank, cfg.num_nodes) == (
        "trainjob", 1, 2, 1, 2)
    assert (cfg.master_addr, cfg.master_port) == ("mnist-node-0-0.mnist", 29500)
    assert cfg.sources["rank"] == "PET_NODE_RANK"
    assert cfg.sources["master_addr"] == "PET_MASTER_ADDR"


def test_early_v2_master_name() -> None:
    assert resolve_config(EARLY_V2, {}).master_addr == "mnist-trainer-node-0-0.mnist"


def test_trainjob_is_a_jobset_by_design_not_an_ambiguity() -> None:
    env = {**NODE_1, "JOBSET_NAME": "mnist", "REPLICATED_JOB_NAME": "node"}
    cfg = resolve_config(env, {})
    assert cfg.launcher == "trainjob" and not cfg.ambiguous
    assert "wins over jobset" in cfg.notes[0]


def test_numeric_procs_per_node_count_one_process_per_pod() -> None:
    # "auto" on a CPU node becomes the CPU count: torchrun would start that many processes;
    # a process started directly is one per pod, and a note says so
    cfg = resolve_config({**NODE_1, "PET_NPROC_PER_NODE": "8"}, {})
    assert (cfg.rank, cfg.world_size) == (1, 2)
    assert any("PET_NPROC_PER_NODE=8" in n for n in cfg.notes)
    assert not any("PET_NPROC" in n for n in resolve_config(NODE_1, {}).notes)


def test_torchrun_in_the_trainer_pod_wins() -> None:
    env = {**NODE_1, "TORCHELASTIC_RUN_ID": "mnist", "RANK": "3", "WORLD_SIZE": "4",
           "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
           "MASTER_ADDR": "mnist-node-0-0.mnist", "MASTER_PORT": "29500"}
    cfg = resolve_config(env, {})
    assert (cfg.launcher, cfg.rank, cfg.node_rank) == ("torchrun", 3, 1)


def test_user_rank_must_agree_with_the_node_rank() -> None:
    with pytest.raises(ConfigError, match="contradicts PET_NODE_RANK"):
        resolve_config({**NODE_1, "RANK": "0"}, {})


def test_env_json_names_trainjob(run_cli: RunCli) -> None:
    proc = run_cli("env", "--json", env=NODE_1)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["launcher"], out["rank"], out["world_size"]) == ("trainjob", 1, 2)
    assert out["sources"]["world_size"] == "PET_NNODES"
