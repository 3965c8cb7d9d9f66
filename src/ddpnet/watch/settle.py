"""The watched process's last step at exit: hand the GIL to torch's backend threads before
the interpreter finalizes.

A gloo run loop frees a finished collective's work after the caller's ``wait`` returned, and
freeing a tensor Python still holds takes the GIL. When a script ends within milliseconds of
its last collective, that thread finds the interpreter finalizing, exits inside the
destructor, and the process aborts with ``terminate called without an active exception``
(exit 134; torch issue 190489, torch 2.13 CPU: 8 of 12 unwatched two-rank runs of three
``all_reduce`` calls and an exit, 6 of 15 of the Lightning Trainer script). Registered at
start-up, before the script's own ``atexit`` handlers, it runs after all of them: a
collective in one of those is settled too. ``destroy_process_group`` at exit does not help:
DDP and Lightning keep the group alive past it.
"""

from __future__ import annotations

import atexit
import sys
import time

#: how long the exit sleeps (the GIL released) while a process group is alive
SETTLE_S = 0.02

_registered: list[bool] = []


def settle() -> None:
    """Sleep :data:`SETTLE_S` when ``torch.distributed`` is loaded with a group alive (no
    torch import otherwise)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return
    time.sleep(SETTLE_S)


def register() -> None:
    """Once a process: the earlier the call, the later :func:`settle` runs at exit."""
    if not _registered:
        _registered.append(True)
        atexit.register(settle)
