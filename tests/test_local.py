"""The one --local spawner: environments, output prefixes, first failure, signals, bounds —
on real child processes."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ddpnet.errors import ConfigError
from ddpnet.local import (
    MAX_LOCAL_RANKS,
    LocalRanks,
    check_world,
    exit_status,
    local_environ,
)


def _script(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "rank.py"
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


def test_environ_drops_launcher_variables_and_sets_a_loopback_launch() -> None:
    base = {"SLURM_PROCID": "3", "OMPI_COMM_WORLD_RANK": "1", "RANK": "9",
            "NCCL_SOCKET_IFNAME": "eth0", "HOME": "/root", "PMIX_RANK": "2"}
    env = local_environ(base, 1, 4, 29555, cpus=8)
    assert env["RANK"] == "1" and env["WORLD_SIZE"] == "4" and env["LOCAL_RANK"] == "1"
    assert env["MASTER_ADDR"] == "127.0.0.1" and env["MASTER_PORT"] == "29555"
    assert env["GLOO_SOCKET_IFNAME"] == "lo" and "NCCL_SOCKET_IFNAME" not in env
    assert env["OMP_NUM_THREADS"] == "2" and env["HOME"] == "/root"
    assert not any(k.startswith(("SLURM_", "OMPI_", "PMIX_")) for k in env)
    assert "GLOO_SOCKET_IFNAME" not in local_environ(base, 0, 2, 1, pin_loopback=False)
    assert local_environ({"OMP_NUM_THREADS": "7"}, 0, 2, 1)["OMP_NUM_THREADS"] == "7"


def test_the_loopback_pin_is_reported_as_set_by_local() -> None:
    """A --local rank's reports say ``--local`` set GLOO_SOCKET_IFNAME, not the user."""
    from ddpnet.net.select import GLOO, SET_BY, select
    from tests.net.fixtures import LO, cfg

    env = local_environ({SET_BY: "GLOO_SOCKET_IFNAME=someone"}, 0, 2, 1)
    one_host = cfg("127.0.0.1", rank=0, world=2, nodes=1)
    gloo = select(one_host, (LO,), None, env).gloo
    assert (gloo.value, gloo.source, gloo.reason) == ("lo", "--local", "set by --local")
    unpinned = local_environ({SET_BY: "GLOO_SOCKET_IFNAME=--local"}, 0, 2, 1,
                             pin_loopback=False)
    assert SET_BY not in unpinned
    mine = select(one_host, (LO,), None, {GLOO: "lo"}).gloo
    assert (mine.source, mine.reason) == (GLOO, "set in the environment")


@pytest.mark.parametrize("n", [0, -1, MAX_LOCAL_RANKS + 1, 100000])
def test_check_world_refuses_before_spawning(n: int) -> None:
    with pytest.raises(ConfigError) as err:
        check_world(n)
    assert err.value.hint


def test_exit_status_is_shell_style() -> None:
    assert exit_status(0) == 0 and exit_status(3) == 3 and exit_status(-15) == 143


def test_ranks_get_their_environment_and_others_are_prefixed(tmp_path: Path,
                                                             capfd: pytest.CaptureFixture[str],
                                                             ) -> None:
    argv = _script(tmp_path, """
        import os, sys
        print("rank", os.environ["RANK"], "of", os.environ["WORLD_SIZE"], flush=True)
        sys.stderr.write("err" + os.environ["RANK"] + "\\n")
    """)
    with LocalRanks(argv, 3) as ranks:
        result = ranks.wait(timeout=60)
    out, err = capfd.readouterr()
    assert result.code == 0 and result.first_failure is None and not result.timed_out
    assert [e.rank for e in result.exits] == [0, 1, 2]
    assert "rank 0 of 3" in out  # rank 0 keeps the terminal
    assert "[rank 1] rank 1 of 3" in err and "[rank 2] err2" in err
    assert "[rank 0]" not in err


def test_capture_keeps_workers_output_whole(tmp_path: Path) -> None:
    argv = _script(tmp_path, """
        import json, os
        print(json.dumps({"rank": int(os.environ["RANK"])}))
    """)
    with LocalRanks(argv, 3, first=1, capture=True) as ranks:
        result = ranks.wait(timeout=60)
    assert [e.rank for e in result.exits] == [1, 2]
    assert [e.stdout.strip() for e in result.exits] == ['{"rank": 1}', '{"rank": 2}']


def test_first_failure_stops_the_rest_after_grace(tmp_path: Path) -> None:
    argv = _script(tmp_path, """
        import os, sys, time
        if os.environ["RANK"] == "1":
            sys.stderr.write("boom on rank 1\\n")
            sys.exit(7)
        time.sleep(60)
    """)
    start = time.monotonic()
    with LocalRanks(argv, 3) as ranks:
        result = ranks.wait(timeout=60, grace=0.5)
    assert time.monotonic() - start < 20
    assert result.code == 7 and result.first_failure is not None
    assert result.first_failure.rank == 1 and result.first_failure.last_line() == "boom on rank 1"
    stopped = {e.rank for e in result.exits if e.stopped}
    assert stopped == {0, 2}


def test_timeout_is_reported_and_ranks_are_stopped(tmp_path: Path) -> None:
    argv = _script(tmp_path, "import time\ntime.sleep(60)\n")
    with LocalRanks(argv, 2) as ranks:
        result = ranks.wait(timeout=0.5)
        pids = [p.pid for p in ranks.procs]
    assert result.timed_out and all(e.stopped for e in result.exits)
    assert not [pid for pid in pids if _running(pid)]


def test_sigterm_to_the_parent_reaches_every_rank_and_their_children(tmp_path: Path) -> None:
    """A parent process runs LocalRanks; SIGTERM to it must end every rank (and a grandchild
    each rank started), and the parent exits 143."""
    pidfile = tmp_path / "pids"
    rank = tmp_path / "rank.py"
    rank.write_text(textwrap.dedent(f"""
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        with open({str(pidfile)!r}, "a") as fh:
            fh.write(f"{{os.getpid()}} {{child.pid}}\\n")
        time.sleep(120)
    """))
    parent = tmp_path / "parent.py"
    parent.write_text(textwrap.dedent(f"""
        import sys
        from ddpnet.local import LocalRanks
        with LocalRanks([sys.executable, {str(rank)!r}], 2) as ranks:
            sys.exit(ranks.wait(timeout=120).code)
    """))
    proc = subprocess.Popen([sys.executable, str(parent)])
    deadline = time.monotonic() + 60
    while (not pidfile.exists() or len(pidfile.read_text().split()) < 4) and \
            time.monotonic() < deadline:
        time.sleep(0.1)
    pids = [int(p) for p in pidfile.read_text().split()]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143
    time.sleep(0.5)
    alive = [pid for pid in pids if _running(pid)]
    assert not alive, f"left running: {alive}"


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan killed with its group waits for init to reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_kill_9_of_the_spawner_ends_ranks_that_ask_to_die_with_it(tmp_path: Path) -> None:
    """SIGKILL cannot be forwarded: a rank entry calls ``die_with_parent`` (as
    ``python -m ddpnet.check|bench|train`` do) and gets SIGTERM from the kernel instead."""
    pidfile = tmp_path / "pids"
    rank = tmp_path / "rank.py"
    rank.write_text(textwrap.dedent(f"""
        import os, time
        from ddpnet.local import die_with_parent
        die_with_parent()
        with open({str(pidfile)!r}, "a") as fh:
            fh.write(f"{{os.getpid()}}\\n")
        time.sleep(120)
    """))
    parent = tmp_path / "parent.py"
    parent.write_text(textwrap.dedent(f"""
        import sys
        from ddpnet.local import LocalRanks
        with LocalRanks([sys.executable, {str(rank)!r}], 2) as ranks:
            ranks.wait(timeout=120)
    """))
    proc = subprocess.Popen([sys.executable, str(parent)])
    deadline = time.monotonic() + 60
    while (not pidfile.exists() or len(pidfile.read_text().split()) < 2) and \
            time.monotonic() < deadline:
        time.sleep(0.1)
    pids = [int(p) for p in pidfile.read_text().split()]
    proc.kill()
    proc.wait(timeout=10)
    deadline = time.monotonic() + 3
    while any(_running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if _running(p)]


def test_die_with_parent_is_a_no_op_outside_local_ranks() -> None:
    from ddpnet.local import die_with_parent

    die_with_parent({})  # no spawner named: nothing set, nothing raised
    die_with_parent({"DDPNET_PARENT_PID": "not-a-pid"})


def test_interrupted_start_stops_the_ranks_already_started(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C or SIGTERM (raised by the CLI's handler) half-way through ``start`` leaves no
    rank behind: ``__exit__`` never runs when ``__enter__`` raises."""
    started: list[subprocess.Popen[str]] = []
    real = subprocess.Popen

    def popen(*args: object, **kw: object) -> subprocess.Popen[str]:
        if len(started) == 2:
            raise KeyboardInterrupt
        proc = real(*args, **kw)  # type: ignore[call-overload]
        started.append(proc)
        return proc  # type: ignore[no-any-return]

    monkeypatch.setattr(subprocess, "Popen", popen)
    with pytest.raises(KeyboardInterrupt), LocalRanks(
            [sys.executable, "-c", "import time; time.sleep(60)"], 4):
        pass
    assert len(started) == 2
    assert all(p.poll() is not None for p in started)
