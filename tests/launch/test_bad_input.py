"""Bad input to launch/sbatch/exec: exit 2, one error line, a hint, no traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ddpnet.net.ports import listen_socket
from tests.conftest import RunCli, assert_user_error


@pytest.mark.parametrize("args, needle", [
    (("launch", "--nnodes", "0", "--", "t.py"), "--nnodes 0"),
    (("launch", "--nnodes", "2", "--node-rank", "2", "--master-addr", "h", "--", "t.py"),
     "outside 0..1"),
    (("launch", "--via", "mpirun", "--hosts", "a:b,c", "--", "t.py"), "not HOST or HOST:SLOTS"),
    (("launch", "--hosts", "a:2", "--", "t.py"), "--hosts is for --via mpirun"),
    (("launch", "--via", "mpirun", "--hosts", "fe80::1", "--", "t.py"), "without its zone"),
    (("launch", "--via", "mpirun", "--hosts", "[fd00::1", "--", "t.py"), "does not close"),
    # every form of --master-addr a user types: one line, a hint, exit 2
    (("launch", "--nnodes", "2", "--master-addr", "[fd00::1]", "--dry-run", "--", "t.py"),
     "without brackets"),
    (("launch", "--nnodes", "2", "--master-addr", "[fd00::1]:29500", "--dry-run", "--",
      "t.py"), "holds a port"),
    (("launch", "--nnodes", "2", "--master-addr", "n0:29500", "--dry-run", "--", "t.py"),
     "MASTER_PORT=29500"),
    (("launch", "--nnodes", "2", "--master-addr", "10.0.0.256", "--dry-run", "--", "t.py"),
     "not an IPv4 address"),
    (("launch", "--nnodes", "2", "--master-addr", "fe80::1%eth/0", "--dry-run", "--",
      "t.py"), "not an interface name"),
    (("launch", "--nnodes", "2", "--master-addr", "n%0", "--dry-run", "--", "t.py"),
     "only an IPv6 address takes"),
    (("launch", "--via", "mpirun", "--max-restarts", "2", "--", "t.py"), "does not restart"),
    (("launch", "--via", "mpirun", "--hosts", "a:2,b:2", "--nnodes", "3", "--", "t.py"),
     "contradicts the 2 hosts"),
    (("launch", "--nproc-per-node", "x", "--", "t.py"), "not a number"),
    (("launch", "--json", "--", "t.py"), "needs --dry-run"),
    (("launch", "--rdzv", "static", "--max-restarts", "1", "--", "t.py"), "static rendezvous"),
    (("launch", "--dry-run"), "nothing to launch"),
    (("launch", "--nnodes", "2", "--dry-run", "--", "t.py"), "MASTER_ADDR is not set"),
    # the interface this node's ranks would use exists here, in a dry run too; --ifname is
    # --iface's alias
    (("launch", "--iface", "nosuch9", "--dry-run", "--", "t.py"),
     "--iface nosuch9: no such interface on this host"),
    (("launch", "--local", "2", "--ifname", "nosuch9", "--dry-run", "--", "t.py"),
     "--iface nosuch9: no such interface"),
    (("launch", "--via", "mpirun", "--ifname", "nosuch9", "--dry-run", "--", "t.py"),
     "--iface nosuch9: no such interface"),
    # an unknown option of ours before --: named as one, with click's "did you mean"
    (("launch", "--nproc", "2", "--", "t.py"),
     "No such option '--nproc'. Did you mean '--nproc-per-node'?"),
    (("sbatch", "--nodes", "2", "--ntask-per-node", "2", "--", "t.py"),
     "No such option '--ntask-per-node'. (Did you mean one of: '--gpus-per-node', '--ntasks-per-node'"),
    (("k8s", "--nodes", "2", "--image", "i", "--gpu-per-node", "1", "--", "t.py"),
     "No such option '--gpu-per-node'. (Did you mean one of: '--gpus-per-node'"),
    (("exec", "--ifnam", "lo", "--", "t.py"), "No such option '--ifnam'"),
    (("exec", "--", "nosuch.py"), "script nosuch.py not found"),
    (("exec", "--", "nosuch-program-9"), "program nosuch-program-9 not found on PATH"),
    (("sbatch", "--nodes", "2", "--ntasks", "8", "--", "t.py"), "unevenly"),
    (("sbatch", "--nodes", "0", "--", "t.py"), "--nodes 0"),
    (("sbatch", "--nodes", "2", "--ntasks-per-node", "4", "--gpus-per-node", "2", "--",
      "t.py"), "one GPU per rank"),
])
def test_bad_input_exits_2(run_cli: RunCli, args: tuple[str, ...], needle: str) -> None:
    assert_user_error(run_cli(*args), 2, needle)


@pytest.mark.parametrize("via", ["torchrun", "mpirun"])
def test_a_held_master_port_is_named_before_any_rank_starts(run_cli: RunCli, tmp_path: Path,
                                                            via: str) -> None:
    """Not torch's EADDRINUSE traceback after the ranks started: the holder, a hint, exit 2
    (a rank that started would exit 7)."""
    script = tmp_path / "t.py"
    script.write_text("raise SystemExit(7)\n")
    with listen_socket("0.0.0.0", 0) as sock:
        port = sock.getsockname()[1]
        proc = run_cli("launch", "--via", via, "--master-port", str(port), "--", str(script),
                       env={"OMPI_ALLOW_RUN_AS_ROOT": "1",
                            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    assert_user_error(proc, 2, f"MASTER_PORT {port} is already in use",
                      f"pid {os.getpid()}", "--master-port")


def test_an_unresolvable_master_is_named_before_any_rank_starts(run_cli: RunCli,
                                                                tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text("raise SystemExit(7)\n")
    proc = run_cli("launch", "--nnodes", "2", "--node-rank", "1", "--master-addr",
                   "nosuch.invalid", "--", str(script))
    assert_user_error(proc, 2, "MASTER_ADDR nosuch.invalid does not resolve",
                      "/etc/hosts")


def test_launch_in_multi_node_batch_script_is_refused(run_cli: RunCli) -> None:
    proc = run_cli("launch", "--dry-run", "--", "t.py",
                   env={"SLURM_JOB_ID": "9", "SLURM_PROCID": "0", "SLURM_JOB_NUM_NODES": "2",
                        "SLURM_JOB_NODELIST": "a,b"})
    assert_user_error(proc, 2, "batch script of a 2-node SLURM job", "srun --ntasks-per-node=1")


def test_launch_under_srun_takes_everything_from_slurm(run_cli: RunCli) -> None:
    import json

    proc = run_cli("launch", "--dry-run", "--json", "--nproc-per-node", "2", "--", "t.py",
                   env={"SLURM_JOB_ID": "4321", "SLURM_PROCID": "1", "SLURM_NTASKS": "2",
                        "SLURM_STEP_ID": "0", "SLURM_NODEID": "1", "SLURM_NNODES": "2",
                        "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_LOCALID": "0",
                        "SLURM_STEP_TASKS_PER_NODE": "1(x2)"})
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    argv = plan["nodes"][0]["argv"]
    assert argv[argv.index("--node-rank") + 1] == "1"
    assert argv[argv.index("--nnodes") + 1] == "2"
    assert argv[argv.index("--master-addr") + 1] == "gpu07"
    assert plan["sources"]["master_port"] == "derived"
    assert len(plan["nodes"]) == 1
