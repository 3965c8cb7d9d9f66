"""The first-use path, as a new user types it (issue 57): the commands the README and docs
show right after ``check`` and ``init()``, each through the real CLI, on the inputs that
used to give a torch traceback, silence or a harmful fix. Each now gives one ``ddpnet:
error:`` line with its ``hint:`` and exit code, or works.

Where an item needs a lab, a cluster or a full run, its test lives with its module and is
named here: the latency cause (tests/check/test_lab.py, high-latency vs slow-node), bench's
kept rows on a timeout (tests/bench), a finished checkpoint's ``train`` (tests/train),
``sbatch --spare-nodes`` on the real SLURM (tests/launch/test_slurm_recover.py) and the
doctor's firewall fix applied inside a lab node (tests/doctor)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import RunCli, assert_user_error, clean_environ

#: (what the user typed, the environment, exit code, what the error line must say)
REFUSED: list[tuple[list[str], dict[str, str], int, str]] = [
    (["launch", "--local", "2", "--iface", "eth9", "--dry-run", "--", "SCRIPT"], {}, 2,
     "--iface eth9: no such interface on this host"),
    (["launch", "--local", "2", "--ifname", "eth9", "--", "SCRIPT"], {}, 2,
     "--iface eth9: no such interface on this host"),
    (["lauch", "--local", "2"], {}, 2, "Did you mean 'launch'?"),
    (["launch", "--nproc", "2", "--", "SCRIPT"], {}, 2, "Did you mean '--nproc-per-node'?"),
    (["k8s", "--nodes", "2", "--image", "x", "--ifnam", "net1", "--", "SCRIPT"], {}, 2,
     "Did you mean one of: '--iface', '--ifname'"),
    (["exec", "--", "nosuch.py"], {}, 2, "script nosuch.py not found"),
    (["lab", "up", "--nodes", "2", "--rate", "1gbps"], {}, 2,
     "tc reads gbps as bytes per second, so this would shape 8 Gbit/s"),
]


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text("print('trained')\n")
    return path


def _argv(argv: list[str], script: Path) -> list[str]:
    return [str(script) if word == "SCRIPT" else word for word in argv]


@pytest.mark.parametrize(("argv", "env", "code", "says"), REFUSED,
                         ids=[" ".join(a) for a, _, _, _ in REFUSED])
def test_a_mistake_is_one_line_with_its_hint(run_cli: RunCli, script: Path, argv: list[str],
                                             env: dict[str, str], code: int, says: str) -> None:
    assert_user_error(run_cli(*_argv(argv, script), env=env), code, says)


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port another program listens on (not a TCPStore)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_launch_on_a_held_port_names_its_holder_before_any_rank(
        run_cli: RunCli, script: Path, held_port: int) -> None:
    proc = run_cli("launch", "--local", "2", "--master-port", str(held_port), "--", str(script))
    assert_user_error(proc, 2, f"MASTER_PORT {held_port} is already in use", "held by pid")
    assert "trained" not in proc.stdout and "DistNetworkError" not in proc.stderr


def test_launch_local_picks_a_free_port(run_cli: RunCli, script: Path) -> None:
    """Two local launches never collide: neither takes 29500 by default."""
    ports = set()
    for _ in range(2):
        proc = run_cli("launch", "--local", "2", "--dry-run", "--", str(script))
        assert proc.returncode == 0, proc.stderr
        found = re.search(r"--master-port (\d+)", proc.stdout)
        assert found, proc.stdout
        ports.add(int(found.group(1)))
    assert 29500 not in ports and len(ports) == 2, ports


def test_one_interface_option_name_everywhere(run_cli: RunCli, script: Path) -> None:
    """--iface on every command that takes one, --ifname its alias (k8s renders with it)."""
    for option in ("--iface", "--ifname"):
        proc = run_cli("k8s", "--nodes", "2", "--image", "x", option, "net1", "--",
                       str(script))
        assert proc.returncode == 0, proc.stderr
        assert "net1" in proc.stdout
    for command in ("launch", "sbatch", "exec", "k8s", "monitor", "tune"):
        shown = run_cli(command, "--help").stdout
        assert "--iface" in shown and "--ifname" in shown, (command, shown)


@pytest.mark.skipif(shutil.which("mpirun") is None or os.geteuid() != 0,
                    reason="Open MPI's mpirun, run as root (it refuses only root)")
def test_launch_via_mpirun_as_root_suggests_the_flag(run_cli: RunCli, script: Path) -> None:
    proc = run_cli("launch", "--via", "mpirun", "--hosts", "localhost:2", "--", str(script))
    assert_user_error(proc, 2, "refuses to run as root")
    assert "--allow-run-as-root" in proc.stderr


def test_a_bracketed_ipv6_init_method_stays_whole(run_cli: RunCli) -> None:
    proc = run_cli("env", "--init-method", "tcp://[fd00::2]:23456")
    assert proc.returncode == 0, proc.stderr
    assert "tcp://[fd00::2]:23456" in proc.stdout and "tcp://:23456" not in proc.stdout


def test_sbatch_with_a_spare_names_its_step_task_count_with_torchrun(run_cli: RunCli) -> None:
    """The step must not inherit the allocation's SLURM_NTASKS (4 here: 3 + a spare)."""
    proc = run_cli("sbatch", "--nodes", "3", "--spare-nodes", "1", "--ntasks-per-node", "1",
                   "--requeue", "--", "-m", "ddpnet", "train")
    assert proc.returncode == 0, proc.stderr
    assert "#SBATCH --nodes=4" in proc.stdout
    assert re.search(r"srun --nodes=3 .*--ntasks=3 ", proc.stdout), proc.stdout


def test_doctor_outside_a_job_never_fixes_the_firewall_toward_loopback(
        run_cli: RunCli) -> None:
    proc = run_cli("doctor", env={"MASTER_ADDR": ""}, timeout=120)
    assert "127.0.0.0/8" not in proc.stdout, proc.stdout
    fix = [line for line in proc.stdout.splitlines() if "ip saddr !=" in line]
    assert all("iifname != lo" in line for line in fix), fix


def test_tune_into_a_closed_pipe_exits_0() -> None:
    """``ddpnet tune | head -1``: the reader left; nothing on stderr, exit 0."""
    tune = subprocess.Popen([sys.executable, "-m", "ddpnet", "tune"], env=clean_environ(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert tune.stdout is not None and tune.stderr is not None
    tune.stdout.readline()
    tune.stdout.close()
    assert tune.wait(timeout=60) == 0
    assert tune.stderr.read() == b""


@pytest.mark.slow  # two local ranks of torch
def test_bench_into_a_file_prints_each_row_as_it_finishes(tmp_path: Path) -> None:
    out, err = tmp_path / "out", tmp_path / "err"
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.run([sys.executable, "-m", "ddpnet", "bench", "--local", "2",
                               "-b", "256K", "-e", "1M", "--collectives", "all_reduce"],
                              env=clean_environ(), stdout=stdout,
                              stderr=stderr, timeout=300)
    assert proc.returncode == 0, err.read_text()
    rows = out.read_text()
    assert re.search(r"^all_reduce\s+1M\s", rows, re.M) and "1024.0K" not in rows, rows
    assert re.search(r"^\[bench\] \d+/\d+", err.read_text(), re.M), err.read_text()
    assert "Traceback" not in err.read_text()


@pytest.mark.slow  # two local ranks of torch
def test_check_with_a_missing_gloo_interface_never_says_ok_first(run_cli: RunCli) -> None:
    proc = run_cli("check", "--local", "2", env={"GLOO_SOCKET_IFNAME": "eth9"}, timeout=300)
    assert proc.returncode != 0
    assert "cluster verdict pass" not in proc.stdout + proc.stderr
    assert "rank 1 " in proc.stderr and "cluster verdict fail: doctor-failed: this shell's " \
        "GLOO_SOCKET_IFNAME=eth9" in proc.stderr, proc.stderr


@pytest.mark.slow  # four local ranks of torch
def test_bench_with_four_ranks_prints_no_torch_store_warnings(run_cli: RunCli) -> None:
    """The ranks waiting for the others to join polled rank 0's store in 0.25 s blocking
    waits, and torch printed two ``waitForInput ... timed out after 250ms`` lines for each
    (eight on ``bench --local 4``, every run)."""
    proc = run_cli("bench", "--local", "4", "-b", "1K", "-e", "1K", "--collectives",
                   "all_reduce", timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "waitForInput" not in proc.stderr, proc.stderr
