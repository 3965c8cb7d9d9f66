"""``ddpnet.bench``: collective bandwidth for torch.distributed against the link's real rate.

``run(BenchConfig(...))`` on every rank of an initialised group returns a :class:`BenchResult`
(rows with algbw/busbw and link efficiency, the link baseline, verdicts). torch is imported
only when ``run`` is called.

The command ``ddpnet bench`` is :func:`ddpnet.bench.command.run` (options -> outcome); the
ranks of ``--local N`` run ``python -m ddpnet.bench`` (``__main__``).
"""

from __future__ import annotations

from typing import Any

from ddpnet.bench.config import ALL_COLLECTIVES, BenchConfig
from ddpnet.bench.result import BenchResult, BenchRow, LinkRate, PairRate, Skipped

__all__ = [
    "ALL_COLLECTIVES", "BenchConfig", "BenchResult", "BenchRow", "LinkRate", "PairRate",
    "Skipped", "run",
]


def run(config: BenchConfig, **kwargs: Any) -> BenchResult:
    """Benchmark on every rank of the initialised process group (see ``driver.run``)."""
    from ddpnet.bench.driver import run as _run

    return _run(config, **kwargs)
