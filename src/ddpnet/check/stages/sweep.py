"""Stage 6 (``--bench``): a short all_reduce sweep with ``ddpnet.bench`` on the group the
process-group stage left up, against the slowest link the tournament measured."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any

from ddpnet.check.context import Findings, RankContext


def sweep(link_gbps: float) -> dict[str, Any]:
    """A 1-64 MiB all_reduce sweep on every rank; without a matrix (``link_gbps`` 0) no
    baseline (the full one is ``ddpnet bench``)."""
    from ddpnet.bench import BenchConfig, LinkRate, run

    link = LinkRate(gbps=link_gbps, method="ddpnet check tournament (slowest link)") \
        if link_gbps > 0 else None
    config = BenchConfig(collectives=("all_reduce",), min_bytes=1 << 20, max_bytes=64 << 20,
                         iters=5, baseline="auto" if link is not None else "none")
    result = run(config, link=link)
    out: dict[str, Any] = dict(result.to_dict())
    out["measured_link_gbps"] = link_gbps
    return out


def slowest_link(gbps: Sequence[Sequence[float | None]]) -> float:
    """A ring all_reduce moves at its slowest link; 0.0 without a matrix (pure)."""
    vals = [v for row in gbps for v in row if v is not None]
    return min(vals) if vals else 0.0


def sweep_stage(ctx: RankContext, found: Findings, go: bool) -> None:
    """Rank 0: tell every rank whether to sweep (and against which link), sweep, report."""
    if not go:
        ctx.store.set("stage/bench", {"go": False, "link": 0.0})
        return
    t = time.monotonic()
    link = slowest_link(found.extra.get("bandwidth_gbps", ()))
    ctx.store.set("stage/bench", {"go": True, "link": link})
    try:
        found.extra["bench"] = ctx.bench(link)
    except Exception as exc:  # the bench is optional: report, do not crash the check
        found.extra["bench"] = {"error": str(exc)}
    ctx.took("bench", t)
    found.stages["bench"] = "pass" if "error" not in found.extra["bench"] else "fail"


def follow(ctx: RankContext) -> None:
    """Ranks > 0: sweep when rank 0 says so; rank 0 reports its own outcome."""
    with contextlib.suppress(Exception):  # the bench is optional
        bench = ctx.store.get("stage/bench", ctx.budget + 60)
        if bench["go"]:
            ctx.bench(float(bench["link"]))
