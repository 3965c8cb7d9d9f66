"""Kubernetes indexed Jobs and JobSet pods: JOB_COMPLETION_INDEX and the headless names."""

from __future__ import annotations

import json

import pytest

from ddpnet.env.jobset import master_hostname
from ddpnet.env.resolve import resolve_config
from ddpnet.errors import ConfigError
from tests.conftest import RunCli

#: pod 2 of JobSet ``pytorch`` (replicated job ``workers``, 4 completions) as in JobSet's own
#: example site/static/examples/pytorch/cnn-mnist/mnist.yaml: MASTER_ADDR/PORT and RANK from
#: the job-completion-index annotation; Kubernetes sets JOB_COMPLETION_INDEX; WORLD_SIZE is
#: the pod count the user adds (the example passes --nnodes=4 to torchrun instead)
POD_2 = {
    "MASTER_ADDR": "pytorch-workers-0-0.pytorch", "MASTER_PORT": "3389", "RANK": "2",
    "PYTHONUNBUFFERED": "0", "JOB_COMPLETION_INDEX": "2", "WORLD_SIZE": "4",
}
#: the downward-API convention for JobSet's labels (jobset.sigs.k8s.io/jobset-name,
#: replicatedjob-name, job-index), no MASTER_ADDR
LABELLED = {"JOB_COMPLETION_INDEX": "3", "WORLD_SIZE": "4", "JOBSET_NAME": "pytorch",
            "REPLICATED_JOB_NAME": "workers", "JOB_INDEX": "0"}


def test_jobset_example_pod() -> None:
    cfg = resolve_config(POD_2, {})
    assert (cfg.launcher, cfg.rank, cfg.world_size, cfg.num_nodes) == ("jobset", 2, 4, 4)
    assert (cfg.local_rank, cfg.local_world_size) == (0, 1)
    assert (cfg.master_addr, cfg.master_port) == ("pytorch-workers-0-0.pytorch", 3389)
    assert not cfg.ambiguous  # manual's RANK/WORLD_SIZE are a fallback, checked not rival


def test_master_derived_from_the_jobset_labels() -> None:
    cfg = resolve_config(LABELLED, {})
    assert cfg.rank == 3 and cfg.sources["rank"] == "JOB_COMPLETION_INDEX"
    assert cfg.master_addr == "pytorch-workers-0-0.pytorch"
    assert "JOBSET_NAME" in cfg.sources["master_addr"]


def test_master_hostname_follows_jobset_naming() -> None:
    assert master_hostname("js", "leader") == "js-leader-0-0.js"
    assert master_hostname("js", "leader", "net") == "js-leader-0-0.net"


def test_plain_indexed_job_without_master_names_the_fix() -> None:
    with pytest.raises(ConfigError) as info:
        resolve_config({"JOB_COMPLETION_INDEX": "1", "WORLD_SIZE": "2"}, {})
    assert "MASTER_ADDR" in str(info.value) and "headless" in info.value.hint


@pytest.mark.parametrize(("env", "needle"), [
    ({"JOB_COMPLETION_INDEX": "1"}, "WORLD_SIZE"),
    ({**LABELLED, "JOB_INDEX": "1"}, "export RANK"),
    ({**LABELLED, "JOB_COMPLETION_INDEX": "x"}, "JOB_COMPLETION_INDEX"),
    ({**LABELLED, "JOB_COMPLETION_INDEX": "4"}, "not below world size"),
])
def test_bad_indexed_job_input(env: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_config(env, {})
    assert needle in f"{info.value} {info.value.hint}"


def test_env_json_names_jobset(run_cli: RunCli) -> None:
    proc = run_cli("env", "--json", env=LABELLED)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["launcher"], out["rank"], out["master_addr"]) == (
        "jobset", 3, "pytorch-workers-0-0.pytorch")
