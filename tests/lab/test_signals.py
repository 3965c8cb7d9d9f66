"""SIGTERM or Ctrl-C to ``ddpnet lab run`` ends what it started on every node within 3 s and
exits 143 / 130 (issue 17: no orphan survives its parent)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ddpnet.lab import Lab
from tests.conftest import clean_environ
from tests.lab_util import requires_netns

pytestmark = requires_netns


def _sleepers(marker: str, parent: int, *, running: bool = False) -> list[int]:
    """PIDs of processes but ``parent`` whose command line carries ``marker`` (alive, not
    zombies): at any stage of a node's start (``ip netns exec``, ``unshare``, ``sh`` carry it
    in their arguments before they exec), or with ``running`` only once it is the command
    itself (the Python sleeper). A node still in ``ip netns exec`` may sit in a mount or a
    namespace switch that a SIGKILL waits for on a loaded host: the 3 s are for what runs."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        cmd = b" ".join(args).decode(errors="replace")
        started = not running or args[0].decode(errors="replace") == sys.executable
        if marker in cmd and started and int(proc.name) != parent and state != "Z":
            found.append(int(proc.name))
    return found


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_lab_run_ends_every_node_s_process(make_lab: Callable[..., Lab],
                                                       signum: int, code: int) -> None:
    lab = make_lab("sg", nodes=2)
    marker = f"ddpnet-signal-test-{time.monotonic_ns()}"
    script = f"import time\ntime.sleep(300)  # {marker}\n"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddpnet", "lab", "run", "--name", lab.name, "--timeout", "300",
         "--", sys.executable, "-c", script],
        env=clean_environ(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # a node's start (namespace, mounts) waits on the kernel's network lock that every other
    # worker's labs take too: 60 s ran out once in a loaded clean-clone run
    deadline = time.monotonic() + 120
    while len(_sleepers(marker, proc.pid, running=True)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    if len(_sleepers(marker, proc.pid, running=True)) != 2:  # why a node's command is missing
        proc.terminate()
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"{len(_sleepers(marker, proc.pid, running=True))} of 2 nodes run the "
                    f"command after 120 s; lab run exited {proc.returncode}:\n{out[-2000:]}\n"
                    f"{err[-2000:]}")
    proc.send_signal(signum)
    sent = time.monotonic()
    _, err = proc.communicate(timeout=30)
    while _sleepers(marker, proc.pid) and time.monotonic() - sent < 3:
        time.sleep(0.05)
    assert not _sleepers(marker, proc.pid), f"left running after 3 s: {_sleepers(marker, proc.pid)}"
    assert proc.returncode == code, err
    assert "Traceback" not in err


@pytest.mark.parametrize("after_s", [0.3, 0.8])
def test_lab_up_killed_with_9_is_cleaned_by_the_next_up_and_down(after_s: float) -> None:
    """kill -9 in the middle of ``lab up``: the next ``up`` rebuilds the lab, and ``down``
    leaves no namespace, /etc/netns entry or state file behind."""
    from ddpnet.lab import state as statemod
    from ddpnet.lab.system import ETC_NETNS, existing_namespaces
    from tests.lab_util import unique_name

    name = unique_name("kn")
    try:
        proc = subprocess.Popen([sys.executable, "-m", "ddpnet", "lab", "up", "--name", name,
                                 "--nodes", "4", "--rate", "1gbit"], env=clean_environ(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(after_s)
        proc.kill()
        proc.wait(timeout=10)
        up = subprocess.run([sys.executable, "-m", "ddpnet", "lab", "up", "--name", name,
                             "--nodes", "4", "--rate", "1gbit"], env=clean_environ(),
                            capture_output=True, text=True, timeout=120)
        assert up.returncode == 0, up.stderr
        assert Lab.attach(name).is_up()
    finally:
        down = subprocess.run([sys.executable, "-m", "ddpnet", "lab", "down", "--name", name],
                              env=clean_environ(), capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stderr
    assert not [ns for ns in existing_namespaces() if ns.startswith(name)]
    assert not list(ETC_NETNS.glob(f"{name}*"))
    assert not statemod.state_path(name).exists()
