"""A table of malformed invocations for every command: each exits 2 (3 where a privilege or a
tool is missing) with one ``ddpnet: error:`` line, a ``hint:`` and no traceback, and under
``--json`` prints one parseable ``{"error": {...}}`` object on stdout.

Every row fails fast: values that would start work when validation is missing are either
refused before anything spawns (``--dry-run``, bounds) or given a short timeout here.
``tests/cli/test_errors.py`` holds the first rows of this idea; none is repeated here.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import RunCli, assert_user_error

_SLURM_STEP = {"SLURM_JOB_ID": "7", "SLURM_NODELIST": "n[1-2]", "SLURM_PROCID": "0",
               "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0", "SLURM_NODEID": "0"}
#: a path no one can create, not even root (a directory under /dev/null)
_NOWHERE = "/dev/null/ddpnet/out"

#: (argv, environment, exit code)
MALFORMED: list[tuple[list[str], dict[str, str], int]] = [
    # env: flags and launcher variables
    (["env", "--json", "--rank", "abc"], {}, 2),
    (["env", "--json", "--world-size", "0"], {}, 2),
    (["env", "--json", "--master-port", "70000"], {}, 2),
    (["env", "--json", "--master-port", "-1"], {}, 2),
    (["env", "--json", "--init-method", "tcp://host"], {}, 2),
    (["env", "--json", "--init-method", ""], {}, 2),
    (["env", "--json", "--init-method", "file://relative/x"], {}, 2),
    (["env", "--json"], {"WORLD_SIZE": "nan", "RANK": "0"}, 2),
    (["env", "--json"], {"WORLD_SIZE": "9" * 5000, "RANK": "0"}, 2),
    (["env", "--json"], {"MASTER_PORT": "99999"}, 2),
    (["env", "--json"], {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "5"}, 2),
    (["env", "--json"], {**_SLURM_STEP, "SLURM_TASKS_PER_NODE": "0(x2)"}, 2),
    (["env", "--json"], {**_SLURM_STEP, "SLURM_TASKS_PER_NODE": "1(x99999999999)"}, 2),
    # env: issue 21's environments (a named file missing, a value that does not parse)
    (["env", "--json"], {"PBS_JOBID": "1.srv", "PBS_NODEFILE": "/nonexistent-ddpnet/n"}, 2),
    (["env", "--json"], {"PBS_JOBID": "1.srv", "PBS_NODEFILE": "/"}, 2),
    (["env", "--json"], {"JOB_ID": "7", "SGE_TASK_ID": "undefined",
                         "PE_HOSTFILE": "/nonexistent-ddpnet/pe"}, 2),
    (["env", "--json"], {"SM_HOSTS": '["algo-1",', "SM_CURRENT_HOST": "algo-1"}, 2),
    (["env", "--json"], {"SM_HOSTS": '["algo-1"]', "SM_CURRENT_HOST": "algo-7"}, 2),
    (["env", "--json"], {"AZ_BATCH_MASTER_NODE": "10.0.0.4", "OMPI_COMM_WORLD_RANK": "0",
                         "OMPI_COMM_WORLD_SIZE": "2"}, 2),
    (["env", "--json"], {"JOB_COMPLETION_INDEX": "1e3", "WORLD_SIZE": "2"}, 2),
    (["env", "--json"], {"PET_NNODES": "1:4", "PET_RDZV_ENDPOINT": "j-worker-0:29400"}, 2),
    # doctor
    (["doctor", "--json", "--master-port", "0"], {}, 2),
    (["doctor", "--json", "--master-port", "abc"], {}, 2),
    (["doctor", "--json", "--cluster-subnet", "10.0.0.0/33"], {}, 2),
    (["doctor", "--json", "--master-addr", ""], {}, 2),
    (["doctor", "--json", "--master-addr", "  "], {}, 2),
    # check
    (["check", "--json", "--timeout", "-1"], {}, 2),
    (["check", "--json", "--report", "/nonexistent-ddpnet/check.html"], {}, 2),
    (["check", "--json", "--timeout", "nan"], {}, 2),
    (["check", "--json", "--timeout", "inf"], {}, 2),
    (["check", "--json", "--join-timeout", "0"], {}, 2),
    (["check", "--json", "--bw-seconds", "nan"], {}, 2),
    (["check", "--json", "--local", "100000"], {}, 2),
    (["check", "--json", "--backend", "mpi"], {}, 2),
    (["check", "--json", "--local", "-1"], {}, 2),
    # bench (all refused before a rank starts)
    (["bench", "--json", "--iters", "0"], {}, 2),
    (["bench", "--json", "--iters", "1000000000000"], {}, 2),
    (["bench", "--json", "--warmup", "-1"], {}, 2),
    (["bench", "--json", "--baseline-time", "nan"], {}, 2),
    (["bench", "--json", "--min-busbw", "nan"], {}, 2),
    (["bench", "--json", "--timeout", "nan"], {}, 2),
    (["bench", "--json", "--timeout", "1e300"], {}, 2),
    (["bench", "--json", "-b", "1K", "-e", "1T"], {}, 2),
    (["bench", "--json", "-b", "abc"], {}, 2),
    (["bench", "--json", "-b", "9" * 5000], {}, 2),
    (["bench", "--json", "--factor", "0"], {}, 2),
    (["bench", "--json", "--local", "-5"], {}, 2),
    (["bench", "--json", "--dtype", "float8"], {}, 2),
    (["bench", "--json", "--iters", "abc"], {}, 2),
    (["bench", "--json", "--csv", _NOWHERE + ".csv", "--iters", "1", "--warmup", "0", "-b",
      "1K", "-e", "1K", "--collectives", "all_reduce", "--baseline", "none"], {}, 2),
    # tune (renders only: no --apply)
    (["tune", "--json", "--master-port", "0"], {}, 2),
    (["tune", "--json", "--master-port", "abc"], {}, 2),
    (["tune", "--json", "--port-range", "5000-1000"], {}, 2),
    (["tune", "--json", "--port-range", "1-99999"], {}, 2),
    (["tune", "--json", "--static-ip", "10.0.0.1"], {}, 2),
    (["tune", "--json", "--cluster-subnet", "::/200"], {}, 2),
    (["tune", "--json", "--root", _NOWHERE], {}, 2),
    (["tune", "--json", "--profile", "1000g"], {}, 2),
    # launch (always --dry-run: nothing starts even if a check were missing)
    (["launch", "--dry-run", "--json", "--nproc-per-node", "0", "--", "x.py"], {}, 2),
    (["launch", "--dry-run", "--json", "--nproc-per-node", "100000", "--", "x.py"], {}, 2),
    (["launch", "--dry-run", "--json", "--nnodes", "0:2", "--", "x.py"], {}, 2),
    (["launch", "--dry-run", "--json", "--nnodes", "3:1", "--", "x.py"], {}, 2),
    (["launch", "--dry-run", "--json", "--nnodes", "99999999999", "--", "x.py"], {}, 2),
    (["launch", "--dry-run", "--json", "--node-rank", "-1", "--", "x.py"], {}, 2),
    (["launch", "--dry-run", "--json", "--master-port", "70000", "--", "x.py"], {}, 2),
    (["launch", "--dry-run", "--json", "--max-restarts", "-1", "--", "x.py"], {}, 2),
    (["launch", "--dry-run", "--json", "--via", "mpirun", "--hosts", "a:0", "--", "x.py"],
     {}, 2),
    (["launch", "--dry-run", "--json", "--via", "mpirun", "--hosts", "a:99999999", "--",
      "x.py"], {}, 2),
    (["launch", "--dry-run", "--json"], {}, 2),
    (["launch", "--dry-run", "--json", "--bogus", "--", "x.py"], {}, 2),
    (["launch", "--dry-run", "--json", "--local", "100000", "--", "x.py"], {}, 2),
    (["launch", "--dry-run", "--json", "--nproc-per-node", "9" * 5000, "--", "x.py"], {}, 2),
    # --hostfile (launch and check): bad files and SSH flags, refused before any ssh runs
    (["launch", "--dry-run", "--json", "--hostfile", "/dev/null", "--", "x.py"], {}, 2),
    (["launch", "--dry-run", "--json", "--hostfile", "/nonexistent/hosts", "--", "x.py"],
     {}, 2),
    (["launch", "--dry-run", "--json", "--hostfile", "/", "--", "x.py"], {}, 2),
    (["launch", "--dry-run", "--json", "--hostfile", "/etc/passwd", "--", "x.py"], {}, 2),
    (["launch", "--dry-run", "--json", "--ssh-user", "bob", "--", "x.py"], {}, 2),
    (["launch", "--dry-run", "--json", "--hostfile", "/etc/hostname", "--ssh-option",
      "BatchMode", "--", "x.py"], {}, 2),
    (["launch", "--dry-run", "--json", "--hostfile", "/etc/hostname", "--local", "2", "--",
      "x.py"], {}, 2),
    (["launch", "--dry-run", "--json", "--hostfile", "/etc/hostname", "--nnodes", "5", "--",
      "x.py"], {}, 2),
    (["launch", "--dry-run", "--json", "--hostfile", "/etc/hostname", "--node-rank", "0",
      "--", "x.py"], {}, 2),
    (["check", "--json", "--hostfile", "/dev/null"], {}, 2),
    (["check", "--json", "--hostfile", "/etc/passwd"], {}, 2),
    (["check", "--json", "--hostfile", "/etc/hostname", "--local", "2"], {}, 2),
    (["check", "--json", "--ssh-option", "X=1"], {}, 2),
    # exec: a launcher's bad variables stop it before it execs anything
    (["exec", "--", "true"], {"WORLD_SIZE": "abc", "RANK": "0"}, 2),
    (["exec", "--", "true"], {"RANK": "3", "WORLD_SIZE": "2"}, 2),
    (["exec"], {}, 2),
    (["exec", "--bogus", "--", "true"], {}, 2),
    # sbatch (renders a script; nothing is submitted)
    (["sbatch", "--json", "--nodes", "100001", "--", "x.py"], {}, 2),
    (["sbatch", "--json", "--nodes", "2", "--ntasks-per-node", "0", "--", "x.py"], {}, 2),
    (["sbatch", "--json", "--nodes", "1", "--ntasks-per-node", "1000000000", "--", "x.py"],
     {}, 2),
    (["sbatch", "--json", "--nodes", "1", "--time", "soon", "--", "x.py"], {}, 2),
    (["sbatch", "--json", "--nodes", "1", "--gpus-per-node", "-1", "--", "x.py"], {}, 2),
    (["sbatch", "--json", "--nodes", "1", "--engine", "mpirun", "--", "x.py"], {}, 2),
    (["sbatch", "--json", "--nodes", "1", "--job-name", "", "--", "x.py"], {}, 2),
    (["sbatch", "--json", "--nodes", "1", "--"], {}, 2),
    (["sbatch", "--json", "--nodes", "1", "--preempt-signal", "USR9@90", "--", "x.py"], {}, 2),
    (["sbatch", "--json", "--nodes", "1", "--preempt-signal", "USR1@99999", "--", "x.py"], {},
     2),
    (["sbatch", "--json", "--nodes", "1", "--preempt-signal", "KILL@90", "--", "x.py"], {}, 2),
    (["sbatch", "--json", "--nodes", "1", "--preempt-signal", "R:USR1", "--", "x.py"], {}, 2),
    (["sbatch", "--nodes", "1", "--script", _NOWHERE + ".sh", "--", "x.py"], {}, 2),
    # k8s (renders only)
    (["k8s", "--json", "--nodes", "0", "--gpus-per-node", "1", "--image", "i", "--", "x.py"],
     {}, 2),
    (["k8s", "--json", "--nodes", "2", "--gpus-per-node", "-1", "--image", "i", "--", "x.py"],
     {}, 2),
    (["k8s", "--json", "--nodes", "2", "--gpus-per-node", "1", "--image", "", "--", "x.py"],
     {}, 2),
    (["k8s", "--json", "--nodes", "2", "--gpus-per-node", "1", "--image", "a b", "--",
      "x.py"], {}, 2),
    (["k8s", "--json", "--nodes", "2", "--gpus-per-node", "1", "--image", "i", "--name",
      "Train_GPT", "--", "x.py"], {}, 2),
    (["k8s", "--json", "--nodes", "2", "--gpus-per-node", "1", "--image", "i", "--name",
      "a" * 60, "--", "x.py"], {}, 2),
    (["k8s", "--json", "--nodes", "2", "--gpus-per-node", "1", "--image", "i", "--namespace",
      "-ml", "--", "x.py"], {}, 2),
    (["k8s", "--json", "--nodes", "2", "--gpus-per-node", "1", "--image", "i", "--shm-size",
      "8GB", "--", "x.py"], {}, 2),
    (["k8s", "--json", "--nodes", "2", "--gpus-per-node", "1", "--image", "i", "--shm-size",
      "0Gi", "--", "x.py"], {}, 2),
    (["k8s", "--json", "--nodes", "2", "--gpus-per-node", "1", "--image", "i", "--iface",
      "eth0:1", "--", "x.py"], {}, 2),
    (["k8s", "--json", "--nodes", "2", "--gpus-per-node", "1", "--image", "i", "--kind",
      "mpijob", "--", "x.py"], {}, 2),
    (["k8s", "--json", "--nodes", "2", "--gpus-per-node", "1", "--image", "i",
      "--check-timeout", "0", "--", "x.py"], {}, 2),
    (["k8s", "--json", "--nodes", "2", "--gpus-per-node", "1", "--image", "i"], {}, 2),
    (["k8s", "--json", "--nodes", "2", "--gpus-per-node", "1", "--", "x.py"], {}, 2),
    (["k8s", "--nodes", "2", "--gpus-per-node", "1", "--image", "i", "-o", _NOWHERE + ".yaml",
      "--", "x.py"], {}, 2),
    # train (refused before torch or a process group)
    (["train", "--json", "--checkpoint-dir", "/proc/version/ckpt"], {}, 2),
    (["train", "--json", "--lr", "nan"], {}, 2),
    (["train", "--json", "--lr", "-1"], {}, 2),
    (["train", "--json", "--pg-timeout", "1e300"], {}, 2),
    (["train", "--json", "--pg-timeout", "nan"], {}, 2),
    (["train", "--json", "--width", "0"], {}, 2),
    (["train", "--json", "--width", "1000000000"], {}, 2),
    (["train", "--json", "--samples", "1000000000000"], {}, 2),
    (["train", "--json", "--eval-samples", "0"], {}, 2),
    (["train", "--json", "--batch-size", "0"], {}, 2),
    (["train", "--json", "--local", "0"], {}, 2),
    (["train", "--json", "--local", "65"], {}, 2),
    (["train", "--json", "--local", "100000"], {}, 2),
    (["train", "--json", "--monitor", "--monitor-interval", "0.001"], {}, 2),
    (["train", "--json", "--model", "resnet"], {}, 2),
    (["train", "--json", "--requeue-on-signal"], {}, 2),
    (["train", "--json"], {"DDPNET_REQUEUE_ON_SIGNAL": "1"}, 2),
    # monitor
    (["monitor", "--json", "--once", "--interval", "0"], {}, 2),
    (["monitor", "--json", "--once", "--interval", "-1"], {}, 2),
    (["monitor", "--json", "--once", "--interval", "nan"], {}, 2),
    (["monitor", "--json", "--duration", "-1"], {}, 2),
    (["monitor", "--json", "--duration", "nan"], {}, 2),
    (["monitor", "--json", "--duration", "inf"], {}, 2),
    (["monitor", "--json", "--duration", "1e300"], {}, 2),
    (["monitor", "--json"], {}, 2),
    (["monitor", "--json", "--once", "--record", _NOWHERE + ".csv"], {}, 2),
    (["monitor", "--json", "--once", "--plot", _NOWHERE + ".png"], {}, 2),
    (["monitor", "--json", "--once", "--iface", ""], {}, 2),
    # lab (validation comes before any namespace is made)
    (["lab", "up", "--json", "--name", "fzl", "--nodes", "0"], {}, 2),
    (["lab", "up", "--json", "--name", "fzl", "--nodes", "5000", "--subnet",
      "198.18.0.0/16"], {}, 2),
    (["lab", "up", "--json", "--name", "Bad/Name", "--nodes", "2"], {}, 2),
    (["lab", "up", "--json", "--name", "a" * 100, "--nodes", "2"], {}, 2),
    (["lab", "up", "--json", "--name", "fzl", "--nodes", "2", "--rate", "2tbit"], {}, 2),
    (["lab", "up", "--json", "--name", "fzl", "--nodes", "2", "--delay", "-1ms"], {}, 2),
    (["lab", "up", "--json", "--name", "fzl", "--nodes", "2", "--loss", "200"], {}, 2),
    (["lab", "up", "--json", "--name", "fzl", "--nodes", "2", "--mtu", "10"], {}, 2),
    (["lab", "up", "--json", "--name", "fzl", "--nodes", "2", "--subnet", "10.0.0.0/24"],
     {}, 2),
    (["lab", "run", "--name", "fzl-absent", "--", "true"], {}, 2),
    (["lab", "run", "--name", "fzl", "--timeout", "0", "--", "true"], {}, 2),
    (["lab", "run", "--name", "fzl", "--timeout", "nan", "--", "true"], {}, 2),
    (["lab", "run", "--name", "fzl", "--master-port", "0", "--", "true"], {}, 2),
    (["lab", "fault", "--json", "nosuchkind", "--name", "fzl-absent", "--node", "0"], {}, 2),
    (["lab", "fault", "--json", "block-port", "--name", "fzl-absent", "--node", "0",
      "--port", "0"], {}, 2),
    (["lab", "fault", "--json", "delay", "--name", "fzl-absent", "--node", "0",
      "--ms", "nan"], {}, 2),
    (["lab", "status", "--json", "--name", "../x"], {}, 2),
    (["lab", "down", "--name", "a\nb"], {}, 2),
]


def _id(row: tuple[list[str], dict[str, str], int]) -> str:
    argv, env, _ = row
    shown = " ".join(a if len(a) < 20 else a[:8] + "..." for a in argv)
    return shown + (" " + ",".join(f"{k}={v[:10]}" for k, v in env.items() if not
                                   k.startswith("SLURM_") or "TASKS" in k) if env else "")


@pytest.mark.parametrize(("argv", "env", "code"), MALFORMED, ids=[_id(r) for r in MALFORMED])
def test_malformed_invocation_is_one_clean_error(run_cli: RunCli, argv: list[str],
                                                 env: dict[str, str], code: int) -> None:
    proc = run_cli(*argv, env=env, timeout=30)
    assert_user_error(proc, code)
    if "--json" not in argv[: argv.index("--") if "--" in argv else len(argv)]:
        assert proc.stdout == "", proc.stdout
        return
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout
    error = json.loads(lines[0])["error"]
    assert error["exit_code"] == code and error["id"] in ("usage", "config",
                                                          "missing-requirement")
    assert error["message"] and error["hint"] and error["message"] in proc.stderr
