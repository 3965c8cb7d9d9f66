"""reduce_scatter: rank r ends with chunk r of the reduction. The size is the input buffer;
busbw (n-1)/n."""

from __future__ import annotations

from typing import Any

from ddpnet.bench.collectives.base import (
    Buffers,
    Collective,
    Ctx,
    rank_values,
    reduced_values,
    split,
)


class ReduceScatter(Collective):
    name = "reduce_scatter"
    places = (False, True)  # in-place: the output is this rank's slice of the input
    reduces = True

    def bus_factor(self, n: int) -> float:
        return (n - 1) / n

    def count(self, nbytes: int, elsize: int, n: int) -> int:
        return split(nbytes // elsize, n) * n

    def buffers(self, ctx: Ctx, count: int, inplace: bool) -> Buffers:
        per = split(count, ctx.world_size)
        send = ctx.torch.empty(count, dtype=ctx.torch_dtype, device=ctx.device)
        if inplace:
            recv = send[ctx.rank * per:(ctx.rank + 1) * per]
        else:
            recv = ctx.torch.empty(per, dtype=ctx.torch_dtype, device=ctx.device)
        return Buffers(send=send, recv=recv, out=recv)

    def fill(self, ctx: Ctx, bufs: Buffers) -> None:
        bufs.send.copy_(rank_values(ctx, ctx.rank, bufs.send.numel()))

    def call(self, ctx: Ctx, bufs: Buffers) -> None:
        fn = getattr(ctx.dist, "reduce_scatter_single", None) or ctx.dist.reduce_scatter_tensor
        fn(bufs.recv, bufs.send, op=ctx.reduce_op())

    def expected(self, ctx: Ctx, count: int) -> Any:
        per = split(count, ctx.world_size)
        return reduced_values(ctx, per, start=ctx.rank * per)


COLLECTIVE = ReduceScatter()
