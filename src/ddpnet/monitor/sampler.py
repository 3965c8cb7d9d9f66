"""The sampling loop shared by the CLI and the training recorder."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

from ddpnet.monitor.rates import Sample, compute
from ddpnet.monitor.sources import Sources


def samples(
    sources: Sources,
    names: Sequence[str],
    interval: float,
    *,
    peers: bool = False,
    gpus: bool = False,
    stop: threading.Event | None = None,
) -> Iterator[Sample]:
    """Yield one :class:`Sample` per ``interval`` until ``stop`` is set (or forever).

    Waiting on an Event (not ``time.sleep``) lets a training run stop the sampler at once.
    """
    stop = stop or threading.Event()
    prev = sources.snapshot(peers, gpus)
    while not stop.wait(interval):
        cur = sources.snapshot(peers, gpus)
        yield compute(prev, cur, list(names))
        prev = cur
