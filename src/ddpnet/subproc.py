"""Running a system tool at the edge: no shell, stdin closed, bounded by a timeout, never
raising for a tool that is absent or hangs.

One place for it, so that no probe can wait forever on a tool or a prompt. Probes call
:func:`run_command` (None = "no answer"); callers that report what happened (``tune
--apply``) call :func:`run_tool`, which says whether the tool was absent or timed out.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: exit statuses a shell would give, used for a tool that never ran to completion
ABSENT_RC = 127
TIMED_OUT_RC = 124


@dataclass(frozen=True)
class CommandOutput:
    returncode: int
    stdout: str
    stderr: str = ""
    #: "" when the tool ran; "absent" (not found or not runnable) or "timeout" when not
    failure: str = ""

    @property
    def merged(self) -> str:
        """stdout then stderr, stripped: what a person reads in a report."""
        return (self.stdout + self.stderr).strip()


def run_tool(argv: Sequence[str], timeout: float, *, input: str | None = None,
             env: Mapping[str, str] | None = None, cwd: str | None = None) -> CommandOutput:
    """``argv``'s exit status and output; a tool that is absent gets status 127, one that
    ran past ``timeout`` (killed) 124, each with ``failure`` set and a one-line stderr.
    ``input`` is its stdin (else none), ``env`` its whole environment (else ours)."""
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=False,
            input=input, stdin=None if input is not None else subprocess.DEVNULL,
            env=None if env is None else dict(env), cwd=cwd,
        )
    except FileNotFoundError:
        return CommandOutput(ABSENT_RC, "", f"{argv[0]}: command not found", "absent")
    except OSError as exc:  # not executable, a directory, ...
        return CommandOutput(ABSENT_RC, "", f"{argv[0]}: {exc.strerror or exc}", "absent")
    except subprocess.TimeoutExpired:
        return CommandOutput(TIMED_OUT_RC, "", f"{argv[0]}: timed out after {timeout:g} s",
                             "timeout")
    return CommandOutput(proc.returncode, proc.stdout, proc.stderr)


def run_command(argv: Sequence[str], timeout: float) -> CommandOutput | None:
    """``argv``'s exit status and output, or None when it is absent, unrunnable or timed out."""
    out = run_tool(argv, timeout)
    return None if out.failure else out


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user's counts: signal 0 is refused)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
