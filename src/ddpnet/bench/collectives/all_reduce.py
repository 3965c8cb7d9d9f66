"""all_reduce: every rank ends with the reduction of all ranks' buffers. busbw 2(n-1)/n."""

from __future__ import annotations

from typing import Any

from ddpnet.bench.collectives.base import Buffers, Collective, Ctx, one_buffer, reduced_values


class AllReduce(Collective):
    name = "all_reduce"
    places = (True,)  # torch's all_reduce is in-place only
    reduces = True

    def bus_factor(self, n: int) -> float:
        return 2 * (n - 1) / n

    def buffers(self, ctx: Ctx, count: int, inplace: bool) -> Buffers:
        return one_buffer(ctx, count)

    def call(self, ctx: Ctx, bufs: Buffers) -> None:
        ctx.dist.all_reduce(bufs.send, op=ctx.reduce_op())

    def expected(self, ctx: Ctx, count: int) -> Any:
        return reduced_values(ctx, count)


COLLECTIVE = AllReduce()
