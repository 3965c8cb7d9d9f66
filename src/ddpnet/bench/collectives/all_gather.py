"""all_gather: every rank ends with all ranks' chunks concatenated. The size is the gathered
(output) buffer; busbw (n-1)/n."""

from __future__ import annotations

from typing import Any

from ddpnet.bench.collectives.base import (
    Buffers,
    Collective,
    Ctx,
    rank_values,
    split,
    whole_and_chunk,
)


class AllGather(Collective):
    name = "all_gather"
    places = (False, True)  # in-place: the input is this rank's slice of the output
    chunked = True

    def bus_factor(self, n: int) -> float:
        return (n - 1) / n

    def buffers(self, ctx: Ctx, count: int, inplace: bool) -> Buffers:
        out, send = whole_and_chunk(ctx, count, inplace)
        return Buffers(send=send, recv=out, out=out)

    def call(self, ctx: Ctx, bufs: Buffers) -> None:
        # torch >= 2.13 names it all_gather_single (all_gather_into_tensor is deprecated)
        fn = getattr(ctx.dist, "all_gather_single", None) or ctx.dist.all_gather_into_tensor
        fn(bufs.recv, bufs.send)

    def expected(self, ctx: Ctx, count: int) -> Any:
        per = split(count, ctx.world_size)
        return ctx.torch.cat([rank_values(ctx, r, per) for r in range(ctx.world_size)])


COLLECTIVE = AllGather()
