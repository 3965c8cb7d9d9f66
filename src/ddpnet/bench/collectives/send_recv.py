"""send_recv: every rank sends to rank+1 and receives from rank-1 at once (a ring shift, as
nccl-tests' sendrecv). busbw factor 1."""

from __future__ import annotations

from typing import Any

from ddpnet.bench.collectives.base import Buffers, Collective, Ctx, rank_values, two_buffers


class SendRecv(Collective):
    name = "send_recv"
    places = (False,)

    def bus_factor(self, n: int) -> float:
        return 1.0

    def unsupported(self, backend: str, op: str, n: int) -> str | None:
        if n < 2:
            return "needs at least 2 ranks (a rank cannot send to itself)"
        return None

    def buffers(self, ctx: Ctx, count: int, inplace: bool) -> Buffers:
        return two_buffers(ctx, count)

    def call(self, ctx: Ctx, bufs: Buffers) -> None:
        dist, n = ctx.dist, ctx.world_size
        ops = [dist.P2POp(dist.isend, bufs.send, (ctx.rank + 1) % n),
               dist.P2POp(dist.irecv, bufs.recv, (ctx.rank - 1) % n)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()

    def expected(self, ctx: Ctx, count: int) -> Any:
        return rank_values(ctx, (ctx.rank - 1) % ctx.world_size, count)


COLLECTIVE = SendRecv()
