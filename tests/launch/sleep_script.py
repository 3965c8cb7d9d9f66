"""Waits for a signal: prints 'ready', exits 0 on SIGTERM saying so."""

import os
import signal
import sys
import time


def say(line: str) -> None:
    """One write per line: the ranks share the pipe, and under PYTHONUNBUFFERED a print is
    two writes that another rank's line can land between."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def on_term(signum: int, frame: object) -> None:
    say(f"rank {os.environ.get('RANK')} got signal {signum}")
    sys.exit(0)


signal.signal(signal.SIGTERM, on_term)
say("ready")
time.sleep(120)
