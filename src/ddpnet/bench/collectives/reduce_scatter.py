"""reduce_scatter: rank r ends with chunk r of the reduction. The size is the input buffer;
busbw (n-1)/n."""

from __future__ import annotations

from typing import Any

from ddpnet.bench.collectives.base import (
    Buffers,
    Collective,
    Ctx,
    reduced_values,
    split,
    whole_and_chunk,
)


class ReduceScatter(Collective):
    name = "reduce_scatter"
    places = (False, True)  # in-place: the output is this rank's slice of the input
    chunked = True
    reduces = True

    def bus_factor(self, n: int) -> float:
        return (n - 1) / n

    def buffers(self, ctx: Ctx, count: int, inplace: bool) -> Buffers:
        send, recv = whole_and_chunk(ctx, count, inplace)
        return Buffers(send=send, recv=recv, out=recv)

    def call(self, ctx: Ctx, bufs: Buffers) -> None:
        fn = getattr(ctx.dist, "reduce_scatter_single", None) or ctx.dist.reduce_scatter_tensor
        fn(bufs.recv, bufs.send, op=ctx.reduce_op())

    def expected(self, ctx: Ctx, count: int) -> Any:
        per = split(count, ctx.world_size)
        return reduced_values(ctx, per, start=ctx.rank * per)


COLLECTIVE = ReduceScatter()
