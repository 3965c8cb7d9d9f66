"""Running a system tool at the edge: no shell, stdin closed, bounded by a timeout, never
raising for a tool that is absent or hangs (every caller treats both as "no answer").

One place for it, so that no probe can wait forever on a tool or a prompt.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class CommandOutput:
    returncode: int
    stdout: str
    stderr: str = ""


def run_command(argv: Sequence[str], timeout: float) -> CommandOutput | None:
    """``argv``'s exit status and output, or None when it is absent, unrunnable or timed out."""
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return CommandOutput(proc.returncode, proc.stdout, proc.stderr)
