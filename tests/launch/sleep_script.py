"""Waits for a signal: prints 'ready', exits 0 on SIGTERM saying so."""

import os
import signal
import sys
import time


def on_term(signum: int, frame: object) -> None:
    print(f"rank {os.environ.get('RANK')} got signal {signum}", flush=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
time.sleep(120)
