"""A registry whose all_reduce expects a wrong value at element 0 (importable by spawned
ranks): the check must catch it on every rank."""

from __future__ import annotations

from typing import Any

from ddpnet.bench.collectives import REGISTRY, Collective, Ctx
from ddpnet.bench.collectives.all_reduce import AllReduce


class CorruptAllReduce(AllReduce):
    def expected(self, ctx: Ctx, count: int) -> Any:
        exp = super().expected(ctx, count).clone()
        exp[0] += 1
        return exp


def registry() -> dict[str, Collective]:
    return {**REGISTRY, "all_reduce": CorruptAllReduce()}
