"""A real SLURM (munged + slurmctld + slurmd started by the test): srun resolution, and a
rendered ``ddpnet sbatch --submit`` job that trains."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ddpnet.env.jobport import derive_port, read_port_range
from ddpnet.launch.slurmcluster import SlurmCluster
from tests.slurm_util import labeled_json, requires_slurm, slurm_cluster  # noqa: F401  (fixture)

pytestmark = requires_slurm
SCRIPT = str(Path(__file__).with_name("allreduce_script.py"))


def test_srun_two_tasks_resolve_as_slurm_ranks(slurm_cluster: SlurmCluster) -> None:  # noqa: F811
    p = slurm_cluster.client(["srun", "-n", "2", "--label", sys.executable, "-m", "ddpnet",
                              "env", "--json"], timeout=120)
    assert p.returncode == 0, p.stderr
    objs = labeled_json(p.stdout)
    assert [o["rank"] for o in objs] == [0, 1]
    assert {o["launcher"] for o in objs} == {"slurm"}
    assert {o["world_size"] for o in objs} == {2}
    assert [o["local_rank"] for o in objs] == [0, 1]
    job = str(objs[0]["job_id"])
    # the port comes from the job id, the same on both ranks, outside the ephemeral range
    assert {o["master_port"] for o in objs} == {derive_port(job, read_port_range())}
    assert objs[0]["sources"]["rank"] == "SLURM_PROCID"  # type: ignore[index]


def _results(text: str) -> list[dict[str, Any]]:
    """The script's JSON lines; ranks share the output file, so lines may run together."""
    return [json.loads(m) for m in re.findall(r'\{"rank": [^{}]*\}', text)]


def _submit_and_wait(cluster: SlurmCluster, tmp_path: Path, *args: str) -> tuple[str, str]:
    out = tmp_path / "job-%j.out"
    p = subprocess.run(
        [sys.executable, "-m", "ddpnet", "sbatch", "--nodes", "1", "--output", str(out),
         "--script", str(tmp_path / "job.sh"), "--submit", *args],
        env=cluster.client_env(), capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    job = p.stdout.strip()
    assert job.isdigit(), p.stdout
    state = _wait(cluster, job)
    log = Path(str(out).replace("%j", job))
    text = log.read_text() if log.exists() else ""
    return state, text


def _wait(cluster: SlurmCluster, job: str, timeout: float = 150) -> str:
    """The job's final state (polling scontrol; sbatch --wait polls only every 10 s)."""
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        q = cluster.client(["scontrol", "show", "job", job, "-o"], timeout=20)
        state = next((f.split("=", 1)[1] for f in q.stdout.split() if f.startswith("JobState=")),
                     "")
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"):
            break
        time.sleep(0.3)
    times = {f.split("=", 1)[0]: f.split("=", 1)[1] for f in q.stdout.split() if "=" in f}
    print(job, state, times.get("SubmitTime"), times.get("StartTime"), times.get("EndTime"))
    return state


def test_sbatch_submit_trains_with_torchrun_in_a_step(slurm_cluster: SlurmCluster,  # noqa: F811
                                                      tmp_path: Path) -> None:
    state, text = _submit_and_wait(slurm_cluster, tmp_path, "--ntasks-per-node", "2",
                                   "--ifname", "lo", "--", SCRIPT)
    assert state == "COMPLETED", text
    objs = sorted(_results(text), key=lambda o: int(o["rank"]))
    assert [o["rank"] for o in objs] == [0, 1]
    assert {o["sum"] for o in objs} == {3.0}
    assert "MASTER_PORT=" in text


def test_sbatch_engine_srun_one_task_per_rank(slurm_cluster: SlurmCluster,  # noqa: F811
                                              tmp_path: Path) -> None:
    state, text = _submit_and_wait(slurm_cluster, tmp_path, "--ntasks-per-node", "2",
                                   "--engine", "srun", "--ifname", "lo", "--", SCRIPT)
    assert state == "COMPLETED", text
    objs = _results(text)
    assert sorted(o["rank"] for o in objs) == [0, 1]
    assert {o["launcher"] for o in objs} == {"slurm"}
    assert {o["sum"] for o in objs} == {3.0}


def test_sbatch_preflight_check_passes_then_trains(slurm_cluster: SlurmCluster,  # noqa: F811
                                                    tmp_path: Path) -> None:
    from ddpnet.cli.main import COMMANDS

    if "check" not in COMMANDS:
        pytest.skip("ddpnet check has not landed yet (tried by hand with the check branch)")
    state, text = _submit_and_wait(slurm_cluster, tmp_path, "--ntasks-per-node", "2",
                                   "--preflight", "--ifname", "lo", "--", SCRIPT)
    assert state == "COMPLETED", text
    assert "ddpnet check: PASS" in text, text
    assert text.index("ddpnet check: PASS") < text.index('{"rank"')
    assert sorted(o["rank"] for o in _results(text)) == [0, 1]


def test_batch_step_is_one_process_with_the_job_port(slurm_cluster: SlurmCluster,  # noqa: F811
                                                     tmp_path: Path) -> None:
    out = tmp_path / "batch.out"
    p = slurm_cluster.client(["sbatch", "--parsable", "-N", "1", "-n", "2", "-o", str(out),
                              "--wrap", f"{sys.executable} -m ddpnet env --json"], timeout=60)
    assert p.returncode == 0, p.stderr
    state = _wait(slurm_cluster, p.stdout.strip().split(";")[0])
    assert state == "COMPLETED", out.read_text() if out.exists() else state
    obj = json.loads(out.read_text())
    assert obj["launcher"] == "slurm"
    assert obj["world_size"] == 1  # not SLURM_NTASKS=2: the batch script is one process
    assert obj["master_port"] == derive_port(str(obj["job_id"]), read_port_range())
    assert os.environ.get("SLURM_JOB_ID") is None  # the test process itself is not in a job


def test_sbatch_requeue_when_the_warning_ends_a_plain_script(
        slurm_cluster: SlurmCluster, tmp_path: Path) -> None:  # noqa: F811
    """SLURM signals every process of the step (as --signal=USR1@90 does before the time
    limit; here scancel sends it now): a script that does not handle SIGUSR1 dies of it
    under torchrun, the step exits 128+10 and the rendered script requeues the job
    (tests/launch/test_slurm_requeue.py: a ddpnet train job checkpoints and resumes)."""
    out = tmp_path / "job-%j.out"
    p = subprocess.run(
        [sys.executable, "-m", "ddpnet", "sbatch", "--nodes", "1", "--output", str(out),
         "--requeue", "--script", str(tmp_path / "job.sh"), "--submit", "--",
         str(Path(__file__).with_name("sleep_script.py"))],
        env=slurm_cluster.client_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    job = p.stdout.strip()
    log = Path(str(out).replace("%j", job))
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and "ready" not in (
                log.read_text() if log.exists() else ""):
            time.sleep(0.3)
        assert "ready" in log.read_text()
        s = slurm_cluster.client(["scancel", "--signal=USR1", job], timeout=20)
        assert s.returncode == 0, s.stderr
        restarts = ""
        while time.monotonic() < deadline:
            q = slurm_cluster.client(["scontrol", "show", "job", job, "-o"], timeout=20)
            restarts = next((f.split("=", 1)[1] for f in q.stdout.split()
                             if f.startswith("Restarts=")), "")
            if restarts == "1":
                break
            time.sleep(0.3)
        assert restarts == "1", q.stdout
        assert f"step preempted (exit 138): requeueing job {job}" in log.read_text()
    finally:
        slurm_cluster.client(["scancel", job], timeout=20)
