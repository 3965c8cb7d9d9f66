"""The check's one torch import per rank, made as cheap as it can be (edge).

torch's import is most of a rank's CPU (~1.2 s of ~1.5 s on the 2-core lab machine), and N
ranks sharing few cores wait for N of them before the rendezvous completes
(docs/scaling.md). So: the cyclic GC is off while torch imports (it re-scans torch's ~10^5
new objects again and again, ~0.1 s); in the check's own process (the CLI or the rank entry,
never a caller that imported ``ddpnet.check.run``) torch is imported without numpy (~0.15 s:
the check never converts a tensor to numpy; ``import numpy`` works again afterwards) and its
objects are frozen out of later collections. Other threads (the doctor's torch facts) wait
for the import here instead of starting a second interpreter to import torch again.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import warnings

#: set by the check's own entry points: this process runs nothing but the check
_OWN_PROCESS = False
#: set once this process imported torch (and torch.distributed), or gave up before
_SETTLED = threading.Event()
_IMPORTED = False


def own_process() -> None:
    """Mark this process as the check's own (the CLI, ``python -m ddpnet.check``)."""
    global _OWN_PROCESS
    _OWN_PROCESS = True


def import_torch() -> None:
    """Import torch.distributed on this thread (the main one: importing torch on two threads
    at once aborts the process), lean where allowed; wakes :func:`wait_imported`."""
    global _IMPORTED
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    # c10d's C++ warnings (a peer's reverse DNS, a store wait's slice) are noise on every
    # rank's stderr
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    lean = _OWN_PROCESS and "torch" not in sys.modules and "numpy" not in sys.modules
    was_enabled = gc.isenabled()
    gc.disable()
    if lean:
        sys.modules["numpy"] = None  # type: ignore[assignment]  # "not installed" to torch
    try:
        import torch.distributed  # noqa: F401
    finally:
        if lean:
            if "numpy" in sys.modules and sys.modules["numpy"] is None:
                del sys.modules["numpy"]
            gc.freeze()
        if was_enabled:
            gc.enable()
    _IMPORTED = True
    _SETTLED.set()


def give_up() -> None:
    """This rank stops (before importing torch, or after): nobody waits for it any longer
    (a waiting doctor thread would hold the interpreter's exit)."""
    _SETTLED.set()


def wait_imported(timeout: float) -> bool:
    """True once :func:`import_torch` finished in this process; False when the rank gave up
    first or after ``timeout``."""
    _SETTLED.wait(timeout)
    return _IMPORTED
