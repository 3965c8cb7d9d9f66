"""One rank of ``ddpnet train`` (``python straggler_worker.py CONFIG_JSON``, as ``ddpnet train
--local`` runs ``python -m ddpnet.train``), except that rank ``SLOW_RANK`` (default 1) sleeps
``SLOW_S`` seconds in its data loader before every batch: slow *before* backward, so the
others wait inside DDP's own bucket all-reduces."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from typing import Any

from ddpnet.train import loop
from ddpnet.train.__main__ import main
from ddpnet.train.run import leave

SLOW_S = float(os.environ.get("SLOW_S", "0"))

if SLOW_S and os.environ.get("RANK") == os.environ.get("SLOW_RANK", "1"):
    _batches = loop._batches

    def slow_batches(loader: Any, skip: int) -> Iterator[Any]:
        for batch in _batches(loader, skip):
            time.sleep(SLOW_S)  # inside the loop's phase("data")
            yield batch

    loop._batches = slow_batches

if __name__ == "__main__":
    leave(main(sys.argv[1:]))
