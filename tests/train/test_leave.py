"""A finished rank leaves with its exit code and all of its buffered output."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import clean_environ

CODE = """
import atexit, sys
from ddpnet.train.run import leave
atexit.register(lambda: print("atexit ran"))
sys.stdout.write("summary, not yet flushed")
sys.stderr.write("note on stderr")
leave(3)
"""


def test_leave_flushes_and_exits_with_the_code() -> None:
    env = clean_environ()
    env.pop("PYTHONUNBUFFERED", None)  # so the write really sits in a buffer
    proc = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 3
    assert proc.stdout == "summary, not yet flushed"  # flushed; atexit skipped, as meant
    assert proc.stderr == "note on stderr"
