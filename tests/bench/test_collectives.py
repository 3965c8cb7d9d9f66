"""Bus factors and byte counts per collective, as nccl-tests defines them (PERFORMANCE.md)."""

from __future__ import annotations

import pytest

from ddpnet.bench.collectives import REGISTRY
from ddpnet.bench.config import ALL_COLLECTIVES


def test_registry_has_every_collective_once() -> None:
    assert tuple(REGISTRY) == ALL_COLLECTIVES
    assert all(REGISTRY[name].name == name for name in ALL_COLLECTIVES)


@pytest.mark.parametrize(("name", "n", "factor"), [
    ("all_reduce", 2, 1.0), ("all_reduce", 4, 1.5), ("all_reduce", 8, 1.75),
    ("all_reduce", 1, 0.0),
    ("all_gather", 4, 0.75), ("all_gather", 2, 0.5),
    ("reduce_scatter", 4, 0.75), ("reduce_scatter", 8, 0.875),
    ("all_to_all", 4, 0.75), ("all_to_all", 16, 15 / 16),
    ("broadcast", 4, 1.0), ("reduce", 4, 1.0), ("send_recv", 4, 1.0), ("send_recv", 2, 1.0),
])
def test_bus_factor(name: str, n: int, factor: float) -> None:
    assert REGISTRY[name].bus_factor(n) == pytest.approx(factor)


@pytest.mark.parametrize(("name", "nbytes", "elsize", "n", "count"), [
    # the size is the whole buffer; split collectives round down to a multiple of n
    ("all_reduce", 1024, 4, 4, 256), ("all_reduce", 1030, 4, 4, 257),
    ("all_gather", 1024, 4, 3, 255), ("all_gather", 64 << 20, 2, 4, 32 << 20),
    ("reduce_scatter", 1024, 4, 3, 255), ("reduce_scatter", 16, 4, 8, 0),
    ("all_to_all", 4096, 4, 6, 1020), ("broadcast", 1000, 8, 4, 125),
    ("reduce", 6, 4, 4, 1), ("send_recv", 4096, 2, 4, 2048),
])
def test_count(name: str, nbytes: int, elsize: int, n: int, count: int) -> None:
    assert REGISTRY[name].count(nbytes, elsize, n) == count


@pytest.mark.parametrize(("name", "places"), [
    ("all_reduce", (True,)), ("broadcast", (True,)), ("reduce", (True,)),
    ("all_gather", (False, True)), ("reduce_scatter", (False, True)),
    ("all_to_all", (False,)), ("send_recv", (False,)),
])
def test_places_follow_torch_api(name: str, places: tuple[bool, ...]) -> None:
    assert REGISTRY[name].places == places


def test_unsupported_reasons() -> None:
    assert REGISTRY["send_recv"].unsupported("gloo", "sum", 1) is not None
    assert REGISTRY["send_recv"].unsupported("gloo", "sum", 2) is None
    reason = REGISTRY["all_reduce"].unsupported("gloo", "avg", 4)
    assert reason is not None and "NCCL" in reason
    assert REGISTRY["all_reduce"].unsupported("nccl", "avg", 4) is None
    assert REGISTRY["broadcast"].unsupported("gloo", "avg", 4) is None  # no reduction


@pytest.mark.parametrize("op", ["sum", "avg", "prod", "max", "min"])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 8, 15, 64])
def test_closed_form_expected_matches_brute_force(op: str, n: int) -> None:
    """The expected reduction is computed in O(count) for any world size; it must equal the
    explicit reduction of every rank's data."""
    import torch
    import torch.distributed as dist

    from ddpnet.bench.collectives.base import Ctx, rank_values, reduce_values, reduced_values

    ctx = Ctx(torch, dist, 0, n, torch.device("cpu"), "float32", op)
    for start, count in ((0, 50), (37, 23)):
        brute = reduce_values(ctx, [rank_values(ctx, r, count, start) for r in range(n)])
        assert torch.equal(reduced_values(ctx, count, start), brute)
