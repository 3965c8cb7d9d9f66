"""Grid Engine jobs, with a real PE_HOSTFILE on disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddpnet.env.resolve import resolve_config
from ddpnet.env.sge import parse_pe_hostfile
from ddpnet.errors import ConfigError
from tests.conftest import RunCli

#: sge_pe(5): one line per host, ``host slots queue processor-range``, the master host first
PE_HOSTFILE = ("node01.cluster 4 all.q@node01.cluster UNDEFINED\n"
               "node02.cluster 4 all.q@node02.cluster UNDEFINED\n")


def job_script(hostfile: Path) -> dict[str, str]:
    """A parallel job's script (qsub(1) ENVIRONMENTAL VARIABLES, sge_pe(5))."""
    return {
        "JOB_ID": "4242", "JOB_NAME": "ddp", "SGE_TASK_ID": "undefined", "NSLOTS": "8",
        "NHOSTS": "2", "PE": "mpi", "PE_HOSTFILE": str(hostfile), "QUEUE": "all.q",
        "SGE_ROOT": "/opt/sge", "SGE_CELL": "default", "ENVIRONMENT": "BATCH",
        "SGE_O_WORKDIR": "/home/u",
    }


@pytest.fixture
def hostfile(tmp_path: Path) -> Path:
    path = tmp_path / "pe_hostfile"
    path.write_text(PE_HOSTFILE)
    return path


def test_job_script_is_one_process_with_the_allocation_noted(hostfile: Path) -> None:
    cfg = resolve_config(job_script(hostfile), {})
    assert (cfg.launcher, cfg.rank, cfg.world_size) == ("sge", 0, 1)
    assert any("8 slots on 2 hosts" in n for n in cfg.notes)
    assert cfg.job_id == "4242" and cfg.sources["master_port"] == "derived"


def test_array_task_has_its_own_job_id(hostfile: Path) -> None:
    a = resolve_config({**job_script(hostfile), "SGE_TASK_ID": "3"}, {})
    b = resolve_config({**job_script(hostfile), "SGE_TASK_ID": "4"}, {})
    assert (a.job_id, b.job_id) == ("4242.3", "4242.4")


def test_serial_job_needs_no_hostfile() -> None:
    cfg = resolve_config({"JOB_ID": "7", "SGE_TASK_ID": "undefined", "NSLOTS": "1"}, {})
    assert cfg.launcher == "sge" and cfg.world_size == 1


def test_tightly_integrated_mpirun_wins(hostfile: Path) -> None:
    env = {**job_script(hostfile), "OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8",
           "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
           "MASTER_ADDR": "node01.cluster"}
    cfg = resolve_config(env, {})
    assert (cfg.launcher, cfg.rank, cfg.node_rank) == ("openmpi", 5, 1)
    assert not cfg.ambiguous


def test_tightly_integrated_mpirun_takes_the_master_from_the_hostfile(hostfile: Path) -> None:
    env = {**job_script(hostfile), "OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8",
           "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}
    cfg = resolve_config(env, {})
    assert (cfg.master_addr, cfg.sources["master_addr"]) == ("node01.cluster", "derived")


def test_parse_pe_hostfile() -> None:
    assert parse_pe_hostfile(PE_HOSTFILE) == (("node01.cluster", 4), ("node02.cluster", 4))
    assert parse_pe_hostfile("n1 2\n") == (("n1", 2),)


@pytest.mark.parametrize(("content", "needle"), [
    ("", "is empty"),
    ("node01\n", "no slot count"),
    ("node01 four all.q@node01 UNDEFINED\n", "not a slot count"),
    ("node01 0 all.q@node01 UNDEFINED\n", "not a slot count"),
    ("n1 4 q UNDEFINED\nn1 4 q UNDEFINED\n", "lists a host twice"),
])
def test_bad_hostfile(tmp_path: Path, content: str, needle: str) -> None:
    path = tmp_path / "pe"
    path.write_text(content)
    with pytest.raises(ConfigError) as info:
        resolve_config(job_script(path), {})
    assert needle in str(info.value) and "host slots queue" in info.value.hint


def test_missing_hostfile_and_slot_mismatch(tmp_path: Path, hostfile: Path) -> None:
    with pytest.raises(ConfigError, match=r"PE_HOSTFILE=.*cannot read it"):
        resolve_config(job_script(tmp_path / "gone"), {})
    with pytest.raises(ConfigError, match="NSLOTS=6 but PE_HOSTFILE lists 8 slots"):
        resolve_config({**job_script(hostfile), "NSLOTS": "6"}, {})


def test_env_json_with_a_hostfile_on_disk(run_cli: RunCli, hostfile: Path) -> None:
    proc = run_cli("env", "--json", env=job_script(hostfile))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["launcher"] == "sge" and out["sources"]["rank"] == "Grid Engine job script"
    assert any("PE_HOSTFILE" in n for n in out["notes"])
