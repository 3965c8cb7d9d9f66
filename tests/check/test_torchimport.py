"""The check's torch import: lean in its own process (no numpy, GC off), unchanged for a
caller that imported ``ddpnet.check.run``; the doctor's wait for it ends when the rank stops."""

from __future__ import annotations

import gc
import subprocess
import sys

from ddpnet.check import torchimport

LEAN = """
import gc, sys, time
from ddpnet.check import torchimport as t
assert t.wait_imported(0.01) is False           # not settled: times out
t.own_process()
t.import_torch()
assert "torch" in sys.modules and "numpy" not in sys.modules, "torch pulled numpy in"
assert gc.isenabled() and t.wait_imported(0) is True
import numpy                                    # still importable afterwards
import torch
assert float(torch.ones(3).sum()) == 3.0
print("lean ok")
"""

GIVE_UP = """
import time
from ddpnet.check import torchimport as t
t.give_up()
start = time.monotonic()
assert t.wait_imported(30) is False and time.monotonic() - start < 10  # not the 30 s
print("given up")
"""


def _python(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_own_process_imports_torch_without_numpy() -> None:
    assert "lean ok" in _python(LEAN)


def test_a_rank_that_stops_releases_the_waiting_doctor() -> None:
    assert "given up" in _python(GIVE_UP)


def test_a_callers_process_keeps_numpy_and_gc() -> None:
    import numpy  # a caller that has numpy: the check must leave it as it was

    assert not torchimport._OWN_PROCESS
    enabled = gc.isenabled()
    torchimport.import_torch()
    assert sys.modules["numpy"] is numpy and gc.isenabled() == enabled
    assert torchimport.wait_imported(0)
