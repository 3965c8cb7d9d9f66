"""The remote wrapper of SSH launches, with real processes: its stdin is the launcher's control
line (a signal name is forwarded to the command's group; end of file stops the group)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

WRAPPER = [sys.executable, "-m", "ddpnet.launch.remote", "--"]
#: a command with a grandchild in its group: prints the grandchild's pid, then waits
GROUP = ["sh", "-c", "sleep 300 & echo $!; wait"]
#: the same with the grandchild in a session of its own (as torchrun starts its workers)
SESSION = ["sh", "-c", "setsid sleep 300 & echo $!; wait"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie is as good as gone
        return fh.read().split(")")[-1].split()[0] != "Z"


def _wait_gone(pid: int, within: float) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("command", [GROUP, SESSION], ids=["group", "own-session"])
def test_end_of_control_line_stops_every_descendant(command: list[str]) -> None:
    proc = subprocess.Popen([*WRAPPER, *command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stdin is not None
    grandchild = int(proc.stdout.readline())
    assert _alive(grandchild)
    proc.stdin.close()  # what a killed ssh client looks like from the remote side
    assert proc.wait(15) == 128 + 15  # the shell died of the SIGTERM
    assert _wait_gone(grandchild, 10), "the remote command's child outlived the launcher"


def test_what_the_command_leaves_behind_ends_with_it() -> None:
    """A worker in its own session whose parent exited (a torchrun that died) goes too."""
    proc = subprocess.Popen([*WRAPPER, "sh", "-c", "setsid sleep 300 & echo $!"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    orphan = int(proc.stdout.readline())
    assert proc.wait(15) == 0
    proc.stdin.close()
    assert _wait_gone(orphan, 10)


def test_a_signal_line_is_forwarded_to_the_command() -> None:
    code = ("import signal, sys, time\n"
            "signal.signal(signal.SIGINT, lambda s, f: (print('got', s, flush=True), "
            "sys.exit(7)))\n"
            "print('ready', flush=True)\n"
            "time.sleep(60)\n")
    proc = subprocess.Popen([*WRAPPER, sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline().strip() == "ready"
    proc.stdin.write("SIGINT\n")
    proc.stdin.flush()
    assert proc.wait(15) == 7
    assert proc.stdout.read().strip() == "got 2"


def test_status_passes_through_and_absent_program_is_127() -> None:
    # the control line stays open (an end of file would stop the command first)
    done = subprocess.Popen([*WRAPPER, "sh", "-c", "exit 5"], stdin=subprocess.PIPE)
    assert done.wait(30) == 5
    assert done.stdin is not None
    done.stdin.close()
    absent = subprocess.run([*WRAPPER, "/nonexistent/python"], stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, timeout=30)
    assert absent.returncode == 127 and "nonexistent" in absent.stderr
    nothing = subprocess.run(WRAPPER, capture_output=True, text=True, timeout=30)
    assert nothing.returncode == 2 and "hint:" in nothing.stderr
