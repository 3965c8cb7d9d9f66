"""Named exit codes shared by every command (docs/exit-codes.md), and their one-line
meanings: ``ddpnet --help`` lists them from here."""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from types import MappingProxyType


class ExitCode(IntEnum):
    OK = 0
    #: a check or verdict failed (doctor/check/bench thresholds)
    CHECK_FAILED = 1
    #: bad input or configuration (flags, environment, files)
    USAGE = 2
    #: a requirement is missing: not root, a system tool absent
    MISSING_REQUIREMENT = 3
    #: the watchdog named why training stalled or lost a rank (ddpnet.watch); every rank
    #: exits with it instead of waiting for the backend's timeout
    WATCHDOG = 4
    #: preempted: a SIGUSR1/SIGTERM stopped training after a step every rank agreed on and
    #: its checkpoint is saved; run it again to resume (sysexits' EX_TEMPFAIL: retry later)
    PREEMPTED = 75
    #: stopped by Ctrl-C (SIGINT), as a shell reports it: 128 + 2
    INTERRUPTED = 130
    #: stopped by SIGTERM (a scheduler, kill): 128 + 15
    TERMINATED = 143


#: what ``ddpnet --help`` says of each code (docs/exit-codes.md has the examples)
MEANINGS: Mapping[ExitCode, str] = MappingProxyType({
    ExitCode.OK: "ok",
    ExitCode.CHECK_FAILED: "a check failed",
    ExitCode.USAGE: "bad input or configuration",
    ExitCode.MISSING_REQUIREMENT: "a requirement is missing (root, a system tool)",
    ExitCode.WATCHDOG: "the watch named a hang",
    ExitCode.PREEMPTED: "preempted, checkpoint saved",
    ExitCode.INTERRUPTED: "Ctrl-C",
    ExitCode.TERMINATED: "SIGTERM",
})


def summary() -> str:
    """``0 ok, 1 a check failed, ...``: every code, in order (pure)."""
    return ", ".join(f"{int(code)} {MEANINGS[code]}" for code in ExitCode)
