"""Real gloo ranks of tests/watch/tutorial.py (no ddpnet import) on loopback: the watch
attaches through every entry point (``python -m ddpnet.attach``, the boot directory and its
variable, ``ddpnet exec``, ``ddpnet launch --local``), each rank connects to the hub, a killed
rank is named by the watch instead of a hang; ``--no-watch`` and ``DDPNET_WATCH=0`` give no
watch; a ``ddpnet.init()`` script under the hook still gets exactly one hub."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ddpnet.local import local_environ
from ddpnet.net.ports import free_port
from ddpnet.watch.attach import ATTACH_VAR, python_path
from tests.watch.gloo_ranks import ROOT, Ran, base_env, one, ranks, wait_all, watched

pytestmark = pytest.mark.slow  # two ranks with torch each: seconds per test

TUTORIAL = str(Path(__file__).with_name("tutorial.py"))


def assert_healthy(runs: list[Ran], watch: bool) -> None:
    for r in runs:
        assert r.code == 0, r.err[-3000:]
        assert "done" in r.out
        assert "ddpnet: warning" not in r.err, r.err[-2000:]
    seen = sorted(w for r in runs for w in watched(r))
    assert seen == [f"{watch} rank {i} of 2" for i in range(2)], seen


ATTACH = [sys.executable, "-m", "ddpnet.attach", TUTORIAL]


@pytest.mark.parametrize("method", ["env", "tcp"])
def test_python_m_ddpnet_attach_watches_an_unchanged_script(method: str,
                                                            tmp_path: Path) -> None:
    extra = {"INIT_METHOD": f"tcp://127.0.0.1:{free_port()}"} if method == "tcp" else {}
    assert_healthy(ranks(ATTACH, tmp_path, **extra), watch=True)


@pytest.mark.parametrize("watch", [True, False])
def test_the_boot_dir_and_its_variable_attach_it(watch: bool, tmp_path: Path) -> None:
    boot = {ATTACH_VAR: "1", "PYTHONPATH": python_path(
        {"PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])})}
    off = {} if watch else {"DDPNET_WATCH": "0"}
    assert_healthy(ranks([sys.executable, TUTORIAL], tmp_path, **boot, **off), watch=watch)


def test_without_the_hook_the_script_is_not_watched(tmp_path: Path) -> None:
    """What makes the tests above able to fail: the same script, started plainly."""
    assert_healthy(ranks([sys.executable, TUTORIAL], tmp_path), watch=False)


def test_a_killed_rank_is_named_by_the_watch(tmp_path: Path) -> None:
    runs = ranks(ATTACH, tmp_path, FAULT="kill", FAULT_STEP="3", STEPS="400", STEP_S="0.05")
    assert runs[1].code == -signal.SIGKILL and "fault kill" in runs[1].out
    assert runs[0].code == 4, runs[0].err[-3000:]
    verdict = [line for line in runs[0].err.splitlines()
               if line.startswith("ddpnet: watch: rank 0 exits")]
    assert verdict and "rank-gone: rank 1 " in verdict[0], runs[0].err[-3000:]
    assert (tmp_path / "watch" / "report.json").is_file()


@pytest.mark.parametrize("flag", ["--watch", "--no-watch"])
def test_ddpnet_exec_attaches_by_default(flag: str, tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "ddpnet", "exec", flag, "--", TUTORIAL]
    assert_healthy(ranks(argv, tmp_path), watch=flag == "--watch")


@pytest.mark.parametrize("flag", ["--watch", "--no-watch"])
def test_ddpnet_launch_local_attaches_by_default(flag: str, tmp_path: Path) -> None:
    ran = one([sys.executable, "-m", "ddpnet", "launch", "--local", "2",
               "--master-port", str(free_port()), flag, "--", TUTORIAL], tmp_path)
    assert_healthy([ran], watch=flag == "--watch")


def test_torchrun_m_ddpnet_attach_is_the_one_line(tmp_path: Path) -> None:
    """docs/watch.md's line for a plain torchrun user."""
    ran = one([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "--master-port", str(free_port()), "-m", "ddpnet.attach", TUTORIAL], tmp_path,
              OMP_NUM_THREADS="1")
    assert_healthy([ran], watch=True)


INIT_SCRIPT = """
import os, psutil, ddpnet
import torch, torch.distributed as dist
handle = ddpnet.init(backend="gloo")
from ddpnet.watch import session
hubs = [p for p in psutil.Process().children()
        if "ddpnet.watch.hub" in " ".join(p.cmdline())]
print(f"init watching {handle.watching} active {session.active()} hubs {len(hubs)}", flush=True)
t = torch.ones(1)
dist.all_reduce(t)
ddpnet.shutdown()
"""


def test_a_ddpnet_init_script_under_the_hook_gets_one_hub(tmp_path: Path) -> None:
    script = tmp_path / "init_script.py"
    script.write_text(INIT_SCRIPT)
    runs = ranks([sys.executable, "-m", "ddpnet.attach", str(script)], tmp_path)
    for r in runs:
        assert r.code == 0, r.err[-3000:]
    lines = sorted(line for r in runs for line in r.out.splitlines() if line.startswith("init"))
    assert lines == ["init watching True active True hubs 0",
                     "init watching True active True hubs 1"], lines


def test_a_killed_rank_under_ddpnet_launch_is_named_before_torchrun_ends_the_job(
        tmp_path: Path) -> None:
    """torchrun SIGTERMs the survivors' process groups within 0.1 s of a rank dying: the hub
    (its own session) outlives that and names the dead rank; rank 0, blocked in the
    collective rank 1 never joins (KILL_AFTER_S), holds SIGTERM while it awaits the verdict
    and prints it."""
    ran = one([sys.executable, "-m", "ddpnet", "launch", "--local", "2", "--master-port",
               str(free_port()), "--", TUTORIAL], tmp_path, FAULT="kill", FAULT_STEP="3",
              STEPS="400", STEP_S="0.05", KILL_AFTER_S="1")
    assert "[rank 1] fault kill" in ran.out
    report = json.loads((tmp_path / "watch" / "report.json").read_text())
    assert report["kind"] == "rank-gone", report
    assert report["diagnosis"]["summary"].startswith("rank 1 "), report["diagnosis"]
    verdict = [line for line in ran.err.splitlines()
               if line.startswith("[rank 0] ddpnet: watch: rank 0 exits")]
    assert verdict and "rank-gone: rank 1 " in verdict[0], ran.err[-3000:]


SPAWN_SCRIPT = """
import os, signal, sys, time
import torch, torch.distributed as dist, torch.multiprocessing as mp

def work(rank, world, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    from ddpnet.watch import session
    # one write: both ranks share the pipe, and an unbuffered print is two writes that the
    # other rank's line can land between
    os.write(1, f"watched {session.active()} rank {rank} of {world}\\n".encode())
    if session.active():  # the fault comes once the watch is up (under load: seconds)
        session._session.connecting.join(60)
    dist.barrier()
    for step in range(int(os.environ["STEPS"])):
        dist.all_reduce(torch.ones(2))
        time.sleep(0.02)
        if os.environ.get("FAULT") == "kill" and rank == 1 and step == 5:
            os.kill(os.getpid(), signal.SIGKILL)
    print("done", flush=True)

if __name__ == "__main__":
    mp.spawn(work, args=(2, int(sys.argv[1])), nprocs=2)
"""


@pytest.mark.parametrize("fault", ["none", "kill"])
def test_ranks_started_by_mp_spawn_are_watched(fault: str, tmp_path: Path) -> None:
    """The guides' launcher: ``python -m ddpnet.attach train.py`` where train.py starts its
    ranks with ``mp.spawn`` (fresh interpreters): they inherit the hook by the environment;
    a killed one is named (mp.spawn then SIGTERMs the other, which waits for the verdict)."""
    script = tmp_path / "spawned.py"
    script.write_text(SPAWN_SCRIPT)
    ran = one([sys.executable, "-m", "ddpnet.attach", str(script), str(free_port())], tmp_path,
              FAULT=fault, STEPS="20")
    seen = sorted(watched(ran))
    assert seen == ["True rank 0 of 2", "True rank 1 of 2"], (seen, ran.err[-3000:])
    if fault == "none":
        assert ran.code == 0 and ran.out.count("done") == 2, ran.err[-3000:]
        return
    report = json.loads((tmp_path / "watch" / "report.json").read_text())
    assert report["kind"] == "rank-gone", report["diagnosis"]
    assert report["diagnosis"]["summary"].startswith("rank 1 "), report["diagnosis"]
    assert ran.code != 0
    assert "ddpnet: watch: rank 0 exits (4): rank-gone: rank 1 " in ran.err, ran.err[-3000:]


def test_an_attached_scripts_metrics_port_in_use_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """What ``ddpnet launch --metrics-port`` gives rank 0 (DDPNET_METRICS_PORT): a port in
    use stops it before its group comes up, said as the CLI says it (rank 0 alone: it never
    reaches the rendezvous the others would wait in)."""
    from ddpnet.net.ports import listen_socket

    held = listen_socket("127.0.0.1", 0)
    busy = held.getsockname()[1]
    try:
        env = local_environ(base_env(tmp_path, DDPNET_METRICS_PORT=str(busy)), 0, 2, free_port(),
                            cpus=2)
        proc = subprocess.Popen(ATTACH, env=env, text=True, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        [ran] = wait_all([proc])
    finally:
        held.close()
    assert ran.code == 2, ran.err[-2000:]
    lines = [line for line in ran.err.splitlines() if line.strip()]
    assert lines[0].startswith("ddpnet: error: metrics port ") and "already in use" in lines[0]
    assert lines[1].startswith("hint: ") and "Traceback" not in ran.err, ran.err
