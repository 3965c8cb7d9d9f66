"""broadcast: every rank ends with the root's buffer. busbw factor 1."""

from __future__ import annotations

from typing import Any

from ddpnet.bench.collectives.base import Buffers, Collective, Ctx, one_buffer, rank_values


class Broadcast(Collective):
    name = "broadcast"
    places = (True,)  # torch's broadcast is in-place only
    root = 0

    def bus_factor(self, n: int) -> float:
        return 1.0

    def buffers(self, ctx: Ctx, count: int, inplace: bool) -> Buffers:
        return one_buffer(ctx, count)

    def call(self, ctx: Ctx, bufs: Buffers) -> None:
        ctx.dist.broadcast(bufs.send, src=self.root)

    def expected(self, ctx: Ctx, count: int) -> Any:
        return rank_values(ctx, 0, count)


COLLECTIVE = Broadcast()
