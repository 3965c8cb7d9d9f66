"""reduce: the root ends with the reduction of all ranks' buffers. busbw factor 1."""

from __future__ import annotations

from typing import Any

from ddpnet.bench.collectives.base import Buffers, Collective, Ctx, one_buffer, reduced_values


class Reduce(Collective):
    name = "reduce"
    places = (True,)  # torch's reduce is in-place only
    reduces = True
    root = 0

    def bus_factor(self, n: int) -> float:
        return 1.0

    def buffers(self, ctx: Ctx, count: int, inplace: bool) -> Buffers:
        return one_buffer(ctx, count)

    def call(self, ctx: Ctx, bufs: Buffers) -> None:
        ctx.dist.reduce(bufs.send, dst=self.root, op=ctx.reduce_op())

    def expected(self, ctx: Ctx, count: int) -> Any:
        if ctx.rank != self.root:
            return None  # non-root buffers are scratch space
        return reduced_values(ctx, count)


COLLECTIVE = Reduce()
