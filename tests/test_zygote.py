"""tests/zygote.py: a zygote child is the script's own process, as ``python SCRIPT`` is."""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from tests import zygote

pytestmark = pytest.mark.skipif(not zygote.enabled(), reason="DDPNET_TEST_ZYGOTE=0")

SCRIPT = textwrap.dedent("""\
    import os, sys, time
    mode = sys.argv[1]
    print("argv", sys.argv[1:], "env", os.environ.get("ZT"), "cwd", os.getcwd())
    print("session", os.getsid(0) == os.getpid(), "main", __name__, "path0",
          sys.path[0] == os.path.dirname(os.path.abspath(__file__)))
    sys.stderr.write("to stderr\\n")
    if mode == "exit":
        sys.exit(3)
    if mode == "raise":
        raise ValueError("boom")
    if mode == "sleep":
        print("sleeping", flush=True)
        time.sleep(120)
    if mode == "group":  # a gloo group that lives until exit: its fds must stay its own
        import torch, torch.distributed as dist
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + os.environ["ZP"],
                                rank=int(os.environ["ZR"]), world_size=2)
        t = torch.ones(2)
        dist.all_reduce(t)
        print("sum", t.sum().item())
""")


def _script(tmp_path: Path) -> str:
    path = tmp_path / "zt.py"
    path.write_text(SCRIPT)
    return str(path)


def test_a_child_has_its_own_argv_environment_directory_session_and_streams(
        tmp_path: Path) -> None:
    proc = zygote.popen([_script(tmp_path), "ok"], env={"ZT": "yes"}, cwd=str(tmp_path),
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                        start_new_session=True)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.splitlines() == [f"argv ['ok'] env yes cwd {tmp_path}",
                                "session True main __main__ path0 True"]
    assert err == "to stderr\n"


@pytest.mark.parametrize(("mode", "code", "needle"), [("exit", 3, ""), ("raise", 1, "ValueError")])
def test_exit_codes_and_tracebacks_are_the_interpreters(tmp_path: Path, mode: str, code: int,
                                                          needle: str) -> None:
    done = zygote.run([_script(tmp_path), mode], capture_output=True, text=True, timeout=60)
    assert done.returncode == code and needle in done.stderr, done


def test_binary_pipes_stay_open_and_carry_bytes(tmp_path: Path) -> None:
    """text=False gives the child's bytes on pipes that stay open (a dropped text wrapper
    closed them: 'read of closed file')."""
    done = zygote.run([_script(tmp_path), "ok"], capture_output=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith(b"argv ['ok']"), done
    assert done.stderr == b"to stderr\n"


def test_a_signal_ends_it_as_subprocess_reports_one(tmp_path: Path) -> None:
    proc = zygote.popen([_script(tmp_path), "sleep"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith("argv")
    proc.stdout.readline()
    assert proc.stdout.readline() == "sleeping\n"
    assert proc.poll() is None
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(30) == -signal.SIGKILL
    proc.stdout.close()


def test_a_gloo_group_exits_cleanly_and_its_cpu_is_counted(tmp_path: Path) -> None:
    """The zygote's own sockets must not be closed under the child's fds at exit (gloo's
    epoll fd reused a number: "nfds != -1", SIGABRT)."""
    from ddpnet.net.ports import free_port

    before, port = zygote.REAPED_CPU_S, str(free_port())
    ranks = [zygote.popen([_script(tmp_path), "group"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "ZP": port, "ZR": str(rank)}) for rank in (0, 1)]
    for proc in ranks:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert "sum 4.0" in out, (proc.pid, out, err)
    assert before < zygote.REAPED_CPU_S


def test_streams_whose_received_numbers_are_0_1_or_2_land_where_they_belong(
        tmp_path: Path) -> None:
    """A received stream fd numbered 0-2 is not overwritten by another stream's dup2 before
    its own (stdout received as fd 0 went to stdin's file, its pipe closed: no output)."""
    out_r, out_w = os.pipe()
    devnull = os.open(os.devnull, os.O_RDONLY)
    pid = os.fork()
    if pid == 0:  # the child: stdout's pipe received as fd 0, stdin's file above it
        try:
            os.dup2(out_w, 0)
            zygote._become({"argv": ["x.py"], "cwd": str(tmp_path), "env": {}},
                           [devnull, 0, 2], [], [])
            os.write(1, b"on stdout\n")
            os._exit(0 if os.read(0, 1) == b"" else 3)  # stdin is the empty file
        except BaseException:
            os._exit(4)
    os.close(out_w)
    os.close(devnull)
    _, status = os.waitpid(pid, 0)
    got = os.read(out_r, 100)
    os.close(out_r)
    assert (os.waitstatus_to_exitcode(status), got) == (0, b"on stdout\n")


def test_a_poll_beside_a_waiting_communicate_loses_nothing(tmp_path: Path) -> None:
    """A drain thread in ``communicate`` and the test's own ``poll`` loop on one child: the
    status is read once, by one of them (the other found the file closed: 'I/O operation on
    closed file', and the child's stdout was lost)."""
    for _ in range(20):
        proc = zygote.popen([_script(tmp_path), "ok"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
        got: dict[str, Any] = {}
        drain = threading.Thread(target=lambda g=got, p=proc: g.update(
            out=p.communicate(timeout=60)))
        drain.start()
        while proc.poll() is None:
            pass
        drain.join(60)
        assert proc.returncode == 0 and got["out"][0].startswith("argv ['ok']"), got


def test_what_only_an_exec_applies_sends_the_child_to_a_real_interpreter() -> None:
    base = dict(os.environ)
    assert zygote.forkable(None) and zygote.forkable(base)
    assert zygote.forkable({**base, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1",
                            "PYTHONPATH": "/x", "RANK": "3"})
    assert not zygote.forkable({**base, "LD_PRELOAD": "/tmp/libskew.so"})
    assert not zygote.forkable({**base, "PYTHONHASHSEED": "7"})
    assert not zygote.forkable({k: v for k, v in base.items() if k != "PATH"} | {
        "MKL_NUM_THREADS": "3"})


def test_a_preloaded_library_gets_a_real_exec_and_omp_threads_are_the_childs(
        tmp_path: Path) -> None:
    """LD_PRELOAD reaches the loader only in a real exec (its cmdline is the script's, not
    the zygote's); OMP_NUM_THREADS reaches a forked child's torch."""
    script = tmp_path / "threads.py"
    script.write_text("import torch\nprint(torch.get_num_threads(), "
                      "b'--serve' in open('/proc/self/cmdline', 'rb').read())\n")
    forked = zygote.run([str(script)], env={**os.environ, "OMP_NUM_THREADS": "1"},
                        capture_output=True, text=True, timeout=120)
    assert forked.stdout.split() == ["1", "True"], forked.stderr
    libm = next(p for p in ("/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib64/libm.so.6")
                if os.path.exists(p))
    execed = zygote.run([str(script)], env={**os.environ, "LD_PRELOAD": libm,
                                            "OMP_NUM_THREADS": "1"},
                        capture_output=True, text=True, timeout=120)
    assert execed.stdout.split() == ["1", "False"], execed.stderr


def test_a_forking_lab_forks_our_scripts_and_modules_not_launchers(tmp_path: Path) -> None:
    import sys

    from tests.lab_util import forks_in_zygote

    script = tmp_path / "rank.py"
    script.write_text("pass\n")
    py = sys.executable
    assert forks_in_zygote([py, str(script), "ok"])
    assert forks_in_zygote([py, "-m", "ddpnet", "check", "--json"])
    assert forks_in_zygote([py, "-m", "ddpnet", "train", "--width", "64"])
    for launcher in (["-m", "ddpnet", "launch", "--", str(script)],
                     ["-m", "ddpnet", "exec", "--", str(script)],
                     ["-m", "torch.distributed.run", str(script)], ["-c", "print(1)"],
                     [str(tmp_path / "missing.py")]):
        assert not forks_in_zygote([py, *launcher]), launcher
    assert not forks_in_zygote(["iperf3", "-s"]) and not forks_in_zygote(["python3", str(script)])
