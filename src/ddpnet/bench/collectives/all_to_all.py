"""all_to_all: rank r sends its chunk j to rank j and receives chunk r from every rank. The
size is the whole send buffer; busbw (n-1)/n."""

from __future__ import annotations

from typing import Any

from ddpnet.bench.collectives.base import Buffers, Collective, Ctx, rank_values, split, two_buffers


class AllToAll(Collective):
    name = "all_to_all"
    places = (False,)  # all_to_all_single cannot alias input and output
    chunked = True

    def bus_factor(self, n: int) -> float:
        return (n - 1) / n

    def buffers(self, ctx: Ctx, count: int, inplace: bool) -> Buffers:
        return two_buffers(ctx, count)

    def call(self, ctx: Ctx, bufs: Buffers) -> None:
        ctx.dist.all_to_all_single(bufs.recv, bufs.send)

    def expected(self, ctx: Ctx, count: int) -> Any:
        per = split(count, ctx.world_size)
        return ctx.torch.cat([rank_values(ctx, r, per, start=ctx.rank * per)
                              for r in range(ctx.world_size)])


COLLECTIVE = AllToAll()
