"""Amazon SageMaker training containers: SM_* variables."""

from __future__ import annotations

import json

import pytest

from ddpnet.env.resolve import resolve_config
from ddpnet.env.sagemaker import parse_hosts
from ddpnet.errors import ConfigError
from tests.conftest import RunCli

#: host 2 of 2, as sagemaker-training-toolkit's environment.py exports it (the variables of
#: its ENVIRONMENT_VARIABLES.md that describe the cluster)
ALGO_2 = {
    "SM_HOSTS": '["algo-1","algo-2"]', "SM_CURRENT_HOST": "algo-2", "SM_NUM_GPUS": "0",
    "SM_NUM_CPUS": "4", "SM_NETWORK_INTERFACE_NAME": "eth0",
    "SM_CURRENT_INSTANCE_TYPE": "ml.c5.xlarge", "SM_MODEL_DIR": "/opt/ml/model",
    "SM_OUTPUT_DATA_DIR": "/opt/ml/output/data",
}
#: the SageMaker Python SDK ModelTrainer drivers' variables (container_drivers tests)
MODEL_TRAINER = {**ALGO_2, "SM_MASTER_ADDR": "algo-1", "SM_MASTER_PORT": "7777",
                 "SM_HOST_COUNT": "2", "SM_CURRENT_HOST_RANK": "1"}


def test_host_index_is_the_rank() -> None:
    cfg = resolve_config(ALGO_2, {})
    assert (cfg.launcher, cfg.rank, cfg.world_size, cfg.node_rank) == ("sagemaker", 1, 2, 1)
    assert cfg.hosts == ("algo-1", "algo-2") and cfg.master_addr == "algo-1"
    assert cfg.sources["rank"] == "SM_CURRENT_HOST in SM_HOSTS"


def test_model_trainer_master_and_rank_variables() -> None:
    cfg = resolve_config(MODEL_TRAINER, {})
    assert (cfg.master_addr, cfg.master_port) == ("algo-1", 7777)
    assert cfg.sources["rank"] == "SM_CURRENT_HOST_RANK"
    assert cfg.sources["master_addr"] == "SM_MASTER_ADDR"


def test_gpus_note_and_torchrun_wins() -> None:
    assert any("SM_NUM_GPUS=8" in n for n in resolve_config(
        {**ALGO_2, "SM_NUM_GPUS": "8"}, {}).notes)
    env = {**ALGO_2, "TORCHELASTIC_RUN_ID": "sm", "RANK": "9", "WORLD_SIZE": "16",
           "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "8", "MASTER_ADDR": "algo-1"}
    assert resolve_config(env, {}).launcher == "torchrun"


@pytest.mark.parametrize(("env", "needle"), [
    ({**ALGO_2, "SM_HOSTS": '["algo-1",'}, "is not JSON"),
    ({**ALGO_2, "SM_HOSTS": '{"a": 1}'}, "not a list of host names"),
    ({**ALGO_2, "SM_HOSTS": "[]"}, "not a list of host names"),
    ({**ALGO_2, "SM_HOSTS": '["algo-1", 2]'}, "not a list of host names"),
    ({**ALGO_2, "SM_HOSTS": '["a","a"]'}, "lists a host twice"),
    ({**ALGO_2, "SM_CURRENT_HOST": "algo-9"}, "is not in SM_HOSTS"),
])
def test_bad_sagemaker_input(env: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_config(env, {})
    assert needle in str(info.value) and info.value.hint


def test_parse_hosts_depth_bomb_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        parse_hosts("[" * 100_000)


def test_env_json_names_sagemaker(run_cli: RunCli) -> None:
    proc = run_cli("env", "--json", env=ALGO_2)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["launcher"], out["rank"], out["hosts"]) == ("sagemaker", 1,
                                                            ["algo-1", "algo-2"])
    assert out["sources"]["launcher"] == "SM_HOSTS, SM_CURRENT_HOST"
