"""all_reduce: every rank ends with the reduction of all ranks' buffers. busbw 2(n-1)/n."""

from __future__ import annotations

from typing import Any

from ddpnet.bench.collectives.base import (
    Buffers,
    Collective,
    Ctx,
    rank_values,
    reduced_values,
)


class AllReduce(Collective):
    name = "all_reduce"
    places = (True,)  # torch's all_reduce is in-place only
    reduces = True

    def bus_factor(self, n: int) -> float:
        return 2 * (n - 1) / n

    def buffers(self, ctx: Ctx, count: int, inplace: bool) -> Buffers:
        buf = ctx.torch.empty(count, dtype=ctx.torch_dtype, device=ctx.device)
        return Buffers(send=buf, recv=buf, out=buf)

    def fill(self, ctx: Ctx, bufs: Buffers) -> None:
        bufs.send.copy_(rank_values(ctx, ctx.rank, bufs.send.numel()))

    def call(self, ctx: Ctx, bufs: Buffers) -> None:
        ctx.dist.all_reduce(bufs.send, op=ctx.reduce_op())

    def expected(self, ctx: Ctx, count: int) -> Any:
        return reduced_values(ctx, count)


COLLECTIVE = AllReduce()
