"""``python -m ddpnet.launch.remote ARGV...``: what an SSH launch runs on each host, around the
rank command, so that the remote processes die when the launcher stops them or dies.

Killing an ``ssh`` client does not signal the remote command: without a terminal, sshd only
closes the command's pipes. So the launcher keeps the ssh client's stdin open as a control
line, and this wrapper (the remote end of it) runs ``ARGV`` in a session of its own and
- on a line ``SIGINT``/``SIGTERM``/... sends that signal to the command's whole process group
  (the launcher forwards Ctrl-C/SIGTERM this way; torchrun stops its workers on either);
- on end of file (the launcher closed it, its ssh was killed, the connection or the
  launching host died) sends SIGTERM, then SIGKILL after :data:`GRACE` seconds;
- exits with the command's status (128+N when a signal ended it), which ssh passes back.
Signals sent to the wrapper itself (SIGTERM/SIGHUP/SIGINT) reach the group the same way.

torchrun starts each worker in a session of its own, so a process group is not the whole
job: the wrapper is a child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``), so workers whose
torchrun died stay its descendants, and SIGKILL (and the exit) reaches every descendant.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from types import FrameType
from typing import Any

#: seconds between SIGTERM and SIGKILL once the launcher is gone
GRACE = 5.0
_NAMES = {s.name: s for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP,
                              signal.SIGUSR1, signal.SIGUSR2)}


def _signal_group(child: subprocess.Popen[Any], signum: int) -> None:
    if child.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signum)


def _become_subreaper() -> None:
    """Orphaned descendants are re-parented to us, not to init (Linux; else a no-op)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _descendants(root: int) -> list[int]:
    """Every process below ``root`` (one scan of /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for pid in children.get(todo.pop(), []):
            found.append(pid)
            todo.append(pid)
    return found


def _kill_tree() -> None:
    """SIGKILL to everything below this wrapper."""
    for pid in _descendants(os.getpid()):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _watch_control(child: subprocess.Popen[Any]) -> None:
    """Forward the launcher's signal lines; on end of file stop the group for good."""
    for line in sys.stdin:
        signum = _NAMES.get(line.strip())
        if signum is not None:
            _signal_group(child, signum)
    _signal_group(child, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(GRACE)
    _kill_tree()


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        sys.stderr.write("ddpnet: error: nothing to run\nhint: python -m ddpnet.launch.remote "
                         "-- PROGRAM ARGS\n")
        return 2
    _become_subreaper()
    try:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        sys.stderr.write(f"ddpnet: error: {argv[0]}: {exc.strerror or exc}\n")
        return 127

    def forward(signum: int, frame: FrameType | None) -> None:
        _signal_group(child, signum)

    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, forward)
    threading.Thread(target=_watch_control, args=(child,), daemon=True).start()
    code = child.wait()
    _kill_tree()  # what the command left behind (a worker its torchrun lost) ends with it
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
