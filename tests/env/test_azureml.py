"""AzureML distributed jobs: AZ_BATCH_* / AZ_BATCHAI_* with the ranks of its launcher."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from ddpnet.env.azureml import parse_master_node
from ddpnet.env.resolve import resolve_config
from ddpnet.errors import ConfigError
from tests.conftest import RunCli, clean_environ
from tests.env.jsonstream import json_objects

#: an MPI job, process 3 of 4 on 2 nodes (Open MPI in AzureML's GPU images): the master
#: variables of learn.microsoft.com "Distributed GPU training guide" and Azure Batch's
#: multi-instance task variables
OPENMPI = {
    "AZ_BATCH_MASTER_NODE": "10.0.0.4:6105", "AZ_BATCHAI_MPI_MASTER_NODE": "10.0.0.4",
    "AZ_BATCHAI_JOB_MASTER_NODE_IP": "10.0.0.4",
    "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
}
#: ``distribution: pytorch``: AzureML sets the torch variables itself
PYTORCH = {
    "AZ_BATCHAI_MPI_MASTER_NODE": "10.0.0.4", "MASTER_ADDR": "10.0.0.4",
    "MASTER_PORT": "6105", "RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0",
    "NODE_RANK": "1",
}
#: Intel MPI (Hydra), older images: the master address without a port
INTELMPI = {"AZ_BATCHAI_JOB_MASTER_NODE_IP": "10.0.0.4", "PMI_RANK": "1", "PMI_SIZE": "2",
            "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "1"}


def test_mpi_job_gets_the_master_mpi_lacks() -> None:
    cfg = resolve_config(OPENMPI, {})
    assert (cfg.launcher, cfg.rank, cfg.world_size, cfg.node_rank) == ("azureml", 3, 4, 1)
    assert (cfg.master_addr, cfg.master_port) == ("10.0.0.4", 6105)
    assert cfg.sources["rank"] == "OMPI_COMM_WORLD_RANK"
    assert cfg.sources["master_addr"] == "AZ_BATCH_MASTER_NODE"
    assert not cfg.ambiguous and "wins over openmpi" in cfg.notes[0]


def test_plain_openmpi_without_azureml_still_needs_a_master() -> None:
    bare = {k: v for k, v in OPENMPI.items() if k.startswith("OMPI_")}
    with pytest.raises(ConfigError, match="MASTER_ADDR is not set"):
        resolve_config(bare, {})


def test_pytorch_distribution() -> None:
    cfg = resolve_config(PYTORCH, {})
    assert (cfg.launcher, cfg.rank, cfg.node_rank, cfg.master_port) == ("azureml", 2, 1, 6105)
    assert cfg.sources["master_addr"] == "MASTER_ADDR"


def test_intel_mpi_with_master_ip_only() -> None:
    cfg = resolve_config(INTELMPI, {})
    assert (cfg.launcher, cfg.rank, cfg.master_addr, cfg.master_port) == (
        "azureml", 1, "10.0.0.4", 29500)
    assert cfg.sources["master_addr"] == "AZ_BATCHAI_JOB_MASTER_NODE_IP"


@pytest.mark.parametrize(("value", "needle"), [
    ("10.0.0.4", "is not ip:port"),
    (":6105", "is not ip:port"),
    ("10.0.0.4:http", "port"),
    ("10.0.0.4:0", "not a number in 1..65535"),
    ("fd00::4:6105", "IPv6 address without a port"),
    ("[fe80::4%eth/0]:6105", "not an interface name"),
])
def test_bad_master_node(value: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_config({**OPENMPI, "AZ_BATCH_MASTER_NODE": value}, {})
    assert needle in str(info.value) and info.value.hint


def test_parse_master_node() -> None:
    assert parse_master_node("10.0.0.4:6105") == ("10.0.0.4", 6105)
    assert parse_master_node("[fd00::4]:6105") == ("fd00::4", 6105)
    assert parse_master_node("[fe80::4%eth0]:6105") == ("fe80::4%eth0", 6105)


def test_env_json_names_azureml(run_cli: RunCli) -> None:
    proc = run_cli("env", "--json", env=OPENMPI)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["launcher"], out["master_addr"], out["master_port"]) == (
        "azureml", "10.0.0.4", 6105)
    assert out["sources"]["master_port"] == "AZ_BATCH_MASTER_NODE"


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="openmpi-bin not installed")
def test_real_mpirun_with_azureml_master_resolves_as_azureml() -> None:
    # AzureML's MPI launch: a real mpirun, its ranks see AZ_BATCH_MASTER_NODE
    env = {"AZ_BATCH_MASTER_NODE": "127.0.0.1:29611",
           "AZ_BATCHAI_MPI_MASTER_NODE": "127.0.0.1"}
    proc = subprocess.run(
        ["mpirun", "-np", "2", "--allow-run-as-root", "--oversubscribe",
         "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo",
         "--mca", "oob_tcp_if_include", "lo",
         sys.executable, "-m", "ddpnet", "env", "--json"],
        env=clean_environ(env), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    objs = json_objects(proc.stdout)
    assert sorted(o["rank"] for o in objs) == [0, 1]
    assert {(o["launcher"], o["master_addr"], o["master_port"]) for o in objs} == {
        ("azureml", "127.0.0.1", 29611)}
    assert {o["sources"]["rank"] for o in objs} == {"OMPI_COMM_WORLD_RANK"}
