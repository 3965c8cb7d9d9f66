"""Round trips between the ranks: the mesh's connects, each timed by the kernel
(``mesh.probe``), as rank 0 reads them from the published rows (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ddpnet.check import mesh

Pair = tuple[int, int]


def rtt_pairs(rows: Mapping[int, Any], world: int) -> dict[Pair, float]:
    """``(prober, peer) -> ms`` from the mesh rows every rank published (pure)."""
    return {(i, j): ms for i, value in rows.items()
            for j, ms in mesh.read_rtt(value, world).items() if i != j}


def rtt_matrix(rtt: Mapping[Pair, float], world: int) -> tuple[tuple[float | None, ...], ...]:
    """``rtt[i][j]``: the round trip rank i timed to rank j, None where not measured."""
    return tuple(tuple(rtt.get((i, j)) for j in range(world)) for i in range(world))
