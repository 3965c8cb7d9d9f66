"""Named exit codes shared by every command (documented in the README)."""

from __future__ import annotations

from enum import IntEnum


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
