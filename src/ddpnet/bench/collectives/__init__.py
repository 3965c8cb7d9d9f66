"""The collective registry: one module per collective, each exporting ``COLLECTIVE``."""

from __future__ import annotations

from collections.abc import Mapping

from ddpnet.bench.collectives import (
    all_gather,
    all_reduce,
    all_to_all,
    broadcast,
    reduce,
    reduce_scatter,
    send_recv,
)
from ddpnet.bench.collectives.base import Buffers, Collective, Ctx

REGISTRY: Mapping[str, Collective] = {
    m.COLLECTIVE.name: m.COLLECTIVE
    for m in (all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all, send_recv)
}

__all__ = ["REGISTRY", "Buffers", "Collective", "Ctx"]
