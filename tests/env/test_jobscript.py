"""Job scripts (PBS, Grid Engine, LSF, SLURM's batch step) are the launching script of their
job, not a world of one: ``ddpnet env`` shows the job's hosts, master (the first host), nodes,
slots per node, derived port, the torchrun command of every node and the scheduler's way to
start them (pbsdsh, qrsh -inherit, blaunch, srun). Injected environments and fixture files."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from ddpnet.config import JobScript
from ddpnet.env.jobport import derive_port
from ddpnet.env.report import render_config
from ddpnet.env.resolve import resolve_config
from tests.conftest import RunCli

#: each scheduler's job script on a 2-host job of 4 slots per host, as the scheduler writes it
SHAPES = {
    # openpbs generate_pbs_nodefile: one line per slot (select=2:ncpus=4:mpiprocs=4)
    "pbs": ({"PBS_JOBID": "1234.pbs-server", "PBS_NODEFILE": "{file}", "PBS_NODENUM": "0",
             "PBS_TASKNUM": "1", "PBS_ENVIRONMENT": "PBS_BATCH"},
            "node01\n" * 4 + "node02\n" * 4, "1234.pbs-server", "PBS_NODEFILE", "pbsdsh -u"),
    # sge_pe(5): host slots queue processor-range, the master host first
    "sge": ({"JOB_ID": "1234", "SGE_TASK_ID": "undefined", "PE": "mpi", "NSLOTS": "8",
             "NHOSTS": "2", "PE_HOSTFILE": "{file}"},
            "node01 4 all.q@node01 UNDEFINED\nnode02 4 all.q@node02 UNDEFINED\n", "1234",
            "PE_HOSTFILE", "qrsh -inherit"),
    # LSF: LSB_DJOB_HOSTFILE one host per slot, LSB_MCPU_HOSTS host/slot pairs
    "lsf": ({"LSB_JOBID": "1234", "LSB_DJOB_HOSTFILE": "{file}",
             "LSB_MCPU_HOSTS": "node01 4 node02 4", "LSB_HOSTS": "node01 " * 4 + "node02 " * 4},
            "node01\n" * 4 + "node02\n" * 4, "1234", "LSB_DJOB_HOSTFILE", "blaunch"),
    "lsf-mcpu": ({"LSB_JOBID": "1234", "LSB_MCPU_HOSTS": "node01 4 node02 4"}, None, "1234",
                 "LSB_MCPU_HOSTS", "blaunch"),
    # SLURM 22.05 batch script (sbatch -N2 --ntasks-per-node 4): no SLURM_STEP_ID
    "slurm": ({"SLURM_JOB_ID": "1234", "SLURM_JOBID": "1234", "SLURM_PROCID": "0",
               "SLURM_NODEID": "0", "SLURM_LOCALID": "0", "SLURM_NTASKS": "8",
               "SLURM_JOB_NUM_NODES": "2", "SLURM_NNODES": "2",
               "SLURM_JOB_NODELIST": "node[01-02]", "SLURM_NODELIST": "node[01-02]",
               "SLURM_TASKS_PER_NODE": "4(x2)"},
              None, "1234", "SLURM_JOB_NODELIST", "srun --nodes 2 --ntasks-per-node 1"),
}


def environ(shape: str, tmp_path: Path) -> dict[str, str]:
    variables, text, *_ = SHAPES[shape]
    path = tmp_path / "hostfile"
    if text is not None:
        path.write_text(text)
    return {k: v.replace("{file}", str(path)) for k, v in variables.items()}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_job_script_sees_its_job(shape: str, tmp_path: Path) -> None:
    _, _, job_id, source, fan_out = SHAPES[shape]
    cfg = resolve_config(environ(shape, tmp_path), {})
    job = cfg.job_script
    assert job is not None, cfg
    assert (job.hosts, job.slots, job.nodes, job.nproc_per_node) == (
        ("node01", "node02"), (4, 4), 2, 4)
    assert (job.master_addr, job.job_id, job.source) == ("node01", job_id, source)
    assert job.master_port == derive_port(job_id) == cfg.master_port
    assert job.node_commands() == tuple(
        f"torchrun --nnodes 2 --nproc-per-node 4 --node-rank {i} --master-addr node01 "
        f"--master-port {job.master_port} YOUR_SCRIPT.py" for i in (0, 1))
    assert fan_out in job.fan_out() and "--master-addr node01" in job.fan_out()
    # the process itself stays a world of one: an init() in the script waits for nobody
    assert (cfg.world_size, cfg.rank) == (1, 0)
    assert cfg.to_dict()["job_script"]["node_commands"] == list(job.node_commands())


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_env_shows_the_job_not_a_world_of_one(shape: str, tmp_path: Path) -> None:
    cfg = resolve_config(environ(shape, tmp_path), {})
    out = io.StringIO()
    render_config(cfg, Console(file=out, width=80))
    text = out.getvalue()
    assert "launching script" in text and "not a rank" in text
    assert "node[01-02] (2)" in text and "node01" in text
    for line in cfg.job_script.node_commands() if cfg.job_script else ():
        assert line in text  # whole, on its line
    assert "--nnodes 1" not in text  # no one-node torchrun line


@pytest.mark.parametrize("fan,expected", [
    ("pbs", "pbsdsh -u -- bash -lc 'torchrun --nnodes 2 --nproc-per-node 2 --node-rank "
            "$PBS_NODENUM --master-addr a --master-port 20000 YOUR_SCRIPT.py'"),
    ("sge", 'i=0; for h in a b; do qrsh -inherit "$h" torchrun --nnodes 2 --nproc-per-node 2 '
            "--node-rank $i --master-addr a --master-port 20000 YOUR_SCRIPT.py & i=$((i+1)); "
            "done; wait"),
    ("lsf", 'i=0; for h in a b; do blaunch "$h" torchrun --nnodes 2 --nproc-per-node 2 '
            "--node-rank $i --master-addr a --master-port 20000 YOUR_SCRIPT.py & i=$((i+1)); "
            "done; wait"),
    ("slurm", "srun --nodes 2 --ntasks-per-node 1 bash -c 'torchrun --nnodes 2 "
              "--nproc-per-node 2 --node-rank $SLURM_NODEID --master-addr a --master-port "
              "20000 YOUR_SCRIPT.py'"),
])
def test_fan_out_per_scheduler(fan: str, expected: str) -> None:
    assert JobScript(fan, "1", ("a", "b"), (2, 3), 20000, "x").fan_out() == expected


def test_uneven_slots_run_the_smallest_count_everywhere(tmp_path: Path) -> None:
    path = tmp_path / "pe"
    path.write_text("n1 4 all.q@n1 UNDEFINED\nn2 2 all.q@n2 UNDEFINED\n")
    cfg = resolve_config({"JOB_ID": "9", "SGE_TASK_ID": "undefined", "PE_HOSTFILE": str(path)},
                         {})
    assert cfg.job_script is not None and cfg.job_script.nproc_per_node == 2
    out = io.StringIO()
    render_config(cfg, Console(file=out, width=100))
    assert "2 (smallest of 4, 2)" in out.getvalue()


def test_tasks_are_not_job_scripts(tmp_path: Path) -> None:
    """An srun task, a pbsdsh task and a jsrun task are ranks: no job-script view."""
    pbs = environ("pbs", tmp_path)
    for env in ({**environ("slurm", tmp_path), "SLURM_STEP_ID": "0",
                 "SLURM_STEP_NUM_TASKS": "8"},
                {**pbs, "PBS_NODENUM": "1", "PBS_TASKNUM": "2"},
                {"LSB_JOBID": "1", "JSM_NAMESPACE_RANK": "0", "JSM_NAMESPACE_SIZE": "2",
                 "LSB_MCPU_HOSTS": "b 1 h1 1 h2 1"}):
        assert resolve_config(env, {}).job_script is None


def test_env_json_in_a_pbs_job_script(run_cli: RunCli, tmp_path: Path) -> None:
    proc = run_cli("env", "--json", env=environ("pbs", tmp_path))
    assert proc.returncode == 0, proc.stderr
    job = json.loads(proc.stdout)["job_script"]
    assert (job["hosts"], job["master_addr"], job["nodes"], job["nproc_per_node"]) == (
        ["node01", "node02"], "node01", 2, 4)


@pytest.mark.parametrize("env", [
    # a blaunch task on another host: the job's host file is not there
    {"LSB_JOBID": "7", "LSB_DJOB_HOSTFILE": "/nonexistent/hostfile"},
    {"LSB_JOBID": "7", "LSB_MCPU_HOSTS": "odd"},
    {"SLURM_JOB_ID": "7", "SLURM_PROCID": "0", "SLURM_JOB_NODELIST": "n[1-"},
])
def test_an_unreadable_job_view_still_resolves_as_one_process(env: dict[str, str]) -> None:
    """The job view is extra: a script that resolved as one process before still does."""
    cfg = resolve_config(env, {})
    assert (cfg.world_size, cfg.job_script) == (1, None)
