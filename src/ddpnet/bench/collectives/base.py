"""What one collective contributes to the driver (as a test file in nccl-tests does): byte
count, buffers and data, the call, the expected result, and the bus-bandwidth factor.

Data are small integers (or +-1 for ``prod``) so that sums, products, max and min are exact in
every dtype at small world sizes; each rank's data differ so a missed contribution shows.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

#: torch.distributed.ReduceOp member for each --op
REDUCE_OPS = {"sum": "SUM", "prod": "PRODUCT", "max": "MAX", "min": "MIN", "avg": "AVG"}


@dataclass
class Buffers:
    """The tensors of one measurement. ``out`` is what the result check reads."""

    send: Any
    recv: Any
    out: Any


@dataclass(frozen=True)
class Ctx:
    """Where a collective runs: torch modules, rank, world, device, dtype and op names."""

    torch: Any
    dist: Any
    rank: int
    world_size: int
    device: Any
    dtype: str
    op: str

    @property
    def torch_dtype(self) -> Any:
        return getattr(self.torch, self.dtype)

    def reduce_op(self) -> Any:
        return getattr(self.dist.ReduceOp, REDUCE_OPS[self.op])

    def empty(self, count: int) -> Any:
        """An uninitialised buffer of ``count`` elements in the run's dtype and device."""
        return self.torch.empty(count, dtype=self.torch_dtype, device=self.device)


#: rank r's data at element i: ((i + 3r) mod 7) + 1, a pattern with period 7 in r
_PERIOD = 7


def rank_values(ctx: Ctx, rank: int, count: int, start: int = 0) -> Any:
    """Rank ``rank``'s data for elements ``start .. start+count`` as float64 on the device:
    1..7 shifted by rank (``prod``: +-1, -1 where (i + rank) mod 3 == 0)."""
    torch = ctx.torch
    idx = torch.arange(start, start + count, dtype=torch.float64, device=ctx.device)
    if ctx.op == "prod":
        return torch.where(torch.remainder(idx + rank, 3) == 0, -1.0, 1.0).to(torch.float64)
    return torch.remainder(idx + 3 * rank, _PERIOD) + 1


def _ranks_in_class(n: int, k: Any, m: int) -> Any:
    """How many r in [0, n) have r mod m == k (k an int or a tensor of residues)."""
    return (n - k + m - 1) // m if isinstance(k, int) else ((n - k + m - 1) // m).clamp(min=0)


def reduced_values(ctx: Ctx, count: int, start: int = 0) -> Any:
    """The reduction over all ``ctx.world_size`` ranks' data for elements ``start ..
    start+count``, in closed form: O(count) time and memory whatever the world size (the data
    repeat with period 7 in the rank, so each residue class of ranks is counted once)."""
    torch, n = ctx.torch, ctx.world_size
    idx = torch.arange(start, start + count, dtype=torch.float64, device=ctx.device)
    if ctx.op == "prod":
        residue = torch.remainder(-idx, 3)  # ranks r = residue (mod 3) contribute -1
        negatives = _ranks_in_class(n, residue, 3)
        return torch.where(torch.remainder(negatives, 2) == 1, -1.0, 1.0).to(torch.float64)
    classes = [(k, _ranks_in_class(n, k, _PERIOD)) for k in range(min(n, _PERIOD))]
    values = [(torch.remainder(idx + 3 * k, _PERIOD) + 1, c) for k, c in classes]
    if ctx.op in ("sum", "avg"):
        total = sum((v * c for v, c in values), torch.zeros_like(idx))
        return total / n if ctx.op == "avg" else total
    stacked = torch.stack([v for v, _ in values])
    return stacked.amax(0) if ctx.op == "max" else stacked.amin(0)


def reduce_values(ctx: Ctx, parts: list[Any]) -> Any:
    """Reference reduction of explicit float64 tensors (tests compare the closed form with
    it)."""
    torch = ctx.torch
    stacked = torch.stack(parts)
    if ctx.op == "sum":
        return stacked.sum(0)
    if ctx.op == "avg":
        return stacked.sum(0) / len(parts)
    if ctx.op == "prod":
        return stacked.prod(0)
    if ctx.op == "max":
        return stacked.amax(0)
    return stacked.amin(0)


class Collective(ABC):
    """One collective. ``count`` is the total element count of the buffer the size names."""

    name: str = ""
    #: in-place variants this collective has in torch's API (True = in-place)
    places: tuple[bool, ...] = (True,)
    #: whether the op uses --op (reductions)
    reduces: bool = False
    #: whether only ``root`` holds the result
    root: int | None = None
    #: whether the buffer is one chunk per rank (its count a multiple of the world size)
    chunked: bool = False

    @abstractmethod
    def bus_factor(self, n: int) -> float:
        """busbw = algbw x factor, as nccl-tests defines it (PERFORMANCE.md)."""

    def count(self, nbytes: int, elsize: int, n: int) -> int:
        """Elements in the total buffer for a size in bytes (rounded down to fit the layout)."""
        total = nbytes // elsize
        return split(total, n) * n if self.chunked else total

    def unsupported(self, backend: str, op: str, n: int) -> str | None:
        """Why this collective cannot run here, or None."""
        if self.reduces and op == "avg" and backend != "nccl":
            return f"--op avg is NCCL-only (backend {backend})"
        return None

    @abstractmethod
    def buffers(self, ctx: Ctx, count: int, inplace: bool) -> Buffers:
        """Allocate the buffers for ``count`` total elements."""

    def fill(self, ctx: Ctx, bufs: Buffers) -> None:
        """(Re)write this rank's input data."""
        bufs.send.copy_(rank_values(ctx, ctx.rank, bufs.send.numel()))

    @abstractmethod
    def call(self, ctx: Ctx, bufs: Buffers) -> None:
        """Run the collective once, synchronously (the work is complete or enqueued on the
        current CUDA stream when this returns)."""

    @abstractmethod
    def expected(self, ctx: Ctx, count: int) -> Any:
        """The float64 result ``bufs.out`` must hold on this rank, or None (nothing to check)."""

    def cast(self, ctx: Ctx, values: Any) -> Any:
        return values.to(ctx.torch_dtype)


def split(count: int, n: int) -> int:
    """Per-rank chunk of a total ``count`` (the total is rounded down to a multiple of n)."""
    return count // n


def one_buffer(ctx: Ctx, count: int) -> Buffers:
    """In-place: the collective overwrites its input."""
    buf = ctx.empty(count)
    return Buffers(send=buf, recv=buf, out=buf)


def two_buffers(ctx: Ctx, count: int) -> Buffers:
    """Out-of-place, input and output of the same size."""
    recv = ctx.empty(count)
    return Buffers(send=ctx.empty(count), recv=recv, out=recv)


def whole_and_chunk(ctx: Ctx, count: int, inplace: bool) -> tuple[Any, Any]:
    """A ``count`` buffer and this rank's chunk: a slice of it in-place, else its own buffer
    (all_gather's input is the chunk, reduce_scatter's output)."""
    per = split(count, ctx.world_size)
    whole = ctx.empty(count)
    chunk = whole[ctx.rank * per:(ctx.rank + 1) * per] if inplace else ctx.empty(per)
    return whole, chunk
