"""broadcast: every rank ends with the root's buffer. busbw factor 1."""

from __future__ import annotations

from typing import Any

from ddpnet.bench.collectives.base import Buffers, Collective, Ctx, rank_values


class Broadcast(Collective):
    name = "broadcast"
    places = (True,)  # torch's broadcast is in-place only
    root = 0

    def bus_factor(self, n: int) -> float:
        return 1.0

    def buffers(self, ctx: Ctx, count: int, inplace: bool) -> Buffers:
        buf = ctx.torch.empty(count, dtype=ctx.torch_dtype, device=ctx.device)
        return Buffers(send=buf, recv=buf, out=buf)

    def fill(self, ctx: Ctx, bufs: Buffers) -> None:
        bufs.send.copy_(rank_values(ctx, ctx.rank, bufs.send.numel()))

    def call(self, ctx: Ctx, bufs: Buffers) -> None:
        ctx.dist.broadcast(bufs.send, src=self.root)

    def expected(self, ctx: Ctx, count: int) -> Any:
        return rank_values(ctx, 0, count)


COLLECTIVE = Broadcast()
