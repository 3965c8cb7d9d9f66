"""Two environments that do not nest by design both match: the priority order chooses, and
the other is reported with its markers (JSON ``ambiguous``, a human warning, an init()
warning), never silently."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from ddpnet.env.detect import LAUNCHERS, ambiguities, nested
from ddpnet.env.report import render_config
from ddpnet.env.resolve import resolve, resolve_config
from ddpnet.errors import ConfigError
from tests.conftest import RunCli

SRUN = {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "5"}
SAGEMAKER = {"SM_HOSTS": '["algo-1"]', "SM_CURRENT_HOST": "algo-1"}


@pytest.fixture
def pbs(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "nodes").write_text("n1\n")
    return {"PBS_JOBID": "9.srv", "PBS_NODEFILE": str(tmp_path / "nodes")}


def test_slurm_and_pbs_are_ambiguous(pbs: dict[str, str]) -> None:
    cfg = resolve_config({**SRUN, **pbs}, {})
    assert cfg.launcher == "slurm"
    (other,) = cfg.ambiguous
    assert (other.launcher, other.conflicts_with) == ("pbs", "slurm")
    assert dict(other.markers) == pbs
    assert cfg.to_dict()["ambiguous"] == [{"launcher": "pbs", "markers": pbs,
                                           "conflicts_with": "slurm"}]


def test_ambiguity_below_an_inner_winner_is_still_reported(pbs: dict[str, str]) -> None:
    # mpirun runs inside both, but SLURM and PBS do not nest: the outer pair is ambiguous
    env = {**SRUN, **pbs, "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"}
    cfg = resolve_config(env, {})
    assert cfg.launcher == "openmpi"
    assert [(a.launcher, a.conflicts_with) for a in cfg.ambiguous] == [("pbs", "slurm")]


def test_sagemaker_and_indexed_job_are_ambiguous() -> None:
    env = {**SAGEMAKER, "JOB_COMPLETION_INDEX": "0", "WORLD_SIZE": "1"}
    assert [a.launcher for a in ambiguities(env)] == ["sagemaker"]


@pytest.mark.parametrize("env", [
    {**SRUN, "TORCHELASTIC_RUN_ID": "x", "RANK": "0", "WORLD_SIZE": "1"},
    {**SRUN, "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"},
    {**SRUN, "RANK": "0", "WORLD_SIZE": "1"},
    {"AZ_BATCH_MASTER_NODE": "10.0.0.4:6105", "OMPI_COMM_WORLD_RANK": "0",
     "OMPI_COMM_WORLD_SIZE": "1"},
    {"PET_NNODES": "1", "PET_NODE_RANK": "0", "PET_MASTER_ADDR": "m",
     "JOB_COMPLETION_INDEX": "0"},
])
def test_nested_by_design_is_not_ambiguous(env: dict[str, str]) -> None:
    assert ambiguities(env) == ()


def test_every_pair_of_batch_systems_is_ambiguous() -> None:
    names = {cls.name: cls for cls in LAUNCHERS}
    outer = ["slurm", "lsf", "pbs", "sge", "sagemaker", "jobset", "pytorchjob"]
    for a in outer:
        for b in outer:
            if a != b:
                assert not nested(names[a], names[b]), (a, b)
    assert nested(names["torchrun"], names["pbs"]) and nested(names["openmpi"], names["sge"])


def test_human_output_warns_with_both_sources(pbs: dict[str, str]) -> None:
    buf = io.StringIO()
    render_config(resolve_config({**SRUN, **pbs}, {}), Console(file=buf, width=300,
                                                                color_system=None))
    text = buf.getvalue()
    assert "warning: ambiguous environment: pbs also matches (PBS_JOBID=9.srv" in text
    assert "slurm was used" in text and "SLURM_PROCID, SLURM_STEP_ID set" in text


def test_init_path_warns(pbs: dict[str, str], tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match="ambiguous environment: pbs"):
        cfg = resolve({**SRUN, **pbs}, proc=tmp_path)
    assert cfg.launcher == "slurm"


def test_env_json_and_human_report_both(run_cli: RunCli, pbs: dict[str, str]) -> None:
    proc = run_cli("env", "--json", env={**SRUN, **pbs})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["launcher"] == "slurm" and out["sources"]["rank"] == "SLURM_PROCID"
    assert out["ambiguous"][0]["launcher"] == "pbs"
    assert out["ambiguous"][0]["markers"]["PBS_JOBID"] == "9.srv"
    human = run_cli("env", env={**SRUN, **pbs})
    assert human.returncode == 0 and "ambiguous environment: pbs" in human.stdout


def test_an_error_of_the_chosen_environment_names_the_other_one(tmp_path: Path) -> None:
    # PBS (chosen over Grid Engine) with its node file gone: the error says SGE matched too
    env = {"PBS_JOBID": "9.srv", "PBS_NODEFILE": str(tmp_path / "gone"), "JOB_ID": "4",
           "SGE_TASK_ID": "undefined"}
    with pytest.raises(ConfigError) as info:
        resolve_config(env, {})
    assert "PBS_NODEFILE" in str(info.value)
    assert "ambiguous environment: sge also matches (JOB_ID=4" in info.value.hint
    assert "\n" not in info.value.message
