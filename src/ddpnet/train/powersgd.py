"""PowerSGD gradient compression as a DDP comm hook, arranged for CPU ranks on slow links.

The algorithm is torch's ``powerSGD_hook`` (Vogels et al., 2019): each gradient matrix M of a
bucket (plus the rank's error from the last step) is sent as rank-r factors P = M·Q and
Q = Mᵀ·P, one power iteration warm-started from the last step's Q, P orthonormalised in
between; what the factors miss stays in the rank's error for the next step. Vectors and
matrices that would not compress ``min_rate`` times are all-reduced as they are.

The arrangement differs where ddpnet's comm-bound benchmark (a 4-node lab, 1 Gbit/s) found
torch's hook spending most of the step on CPU work rather than on the wire:

- nothing is allocated per step: the error, P and Q buffers live as long as the bucket
  (torch clones the bucket every step; a fresh 100 MB tensor costs ~50 ms of page faults);
- the factors are stored transposed (r×rows, r×cols) so both products read M row by row
  (``Mᵀ·P`` is 3-5x slower than ``Pᵀ·M`` with CPU BLAS for a 5000x5000 M);
- the uncompressed tensors travel in P's all-reduce: two collectives per bucket, not three;
- both collectives are issued and waited inside the hook, so every rank issues them in the
  same order. gloo matches collectives by issue order, and torch's hook issues its second
  and third from future callbacks, whose order differs between ranks with several buckets
  (it deadlocked on the lab with a 25M-parameter model).

``plan_bucket`` (pure) decides the layout; :class:`PowerSGD` holds the per-bucket state and
:func:`powersgd_hook` is what DDP calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from math import prod
from typing import Any

import torch

#: factorise a matrix only when that saves at least this factor (torch's default)
MIN_COMPRESSION_RATE = 2.0


@dataclass(frozen=True)
class MatrixSlot:
    """Where one compressed gradient matrix's factors and error live in the bucket's buffers."""

    index: int  # position in ``bucket.gradients()``
    rows: int
    cols: int
    rank: int
    p_offset: int  # into the packed P (+ uncompressed) buffer
    q_offset: int
    e_offset: int  # into the error buffer


@dataclass(frozen=True)
class VectorSlot:
    """An uncompressed tensor: sent whole, packed after the P factors."""

    index: int
    offset: int
    numel: int


@dataclass(frozen=True)
class BucketLayout:
    shapes: tuple[tuple[int, ...], ...]
    matrices: tuple[MatrixSlot, ...]
    vectors: tuple[VectorSlot, ...]
    p_numel: int  # P factors and uncompressed tensors: the first all-reduce
    q_numel: int  # Q factors: the second
    e_numel: int  # the compressed matrices' elements: the error buffer

    @property
    def numel_sent(self) -> int:
        """Elements this rank hands to all-reduce per step for the bucket."""
        return self.p_numel + self.q_numel


def compresses(rows: int, cols: int, rank: int, min_rate: float = MIN_COMPRESSION_RATE) -> bool:
    """torch's ``_should_compress``: factorise only when it saves ``min_rate``x."""
    return (rows + cols) * rank * min_rate < rows * cols


def plan_bucket(shapes: Sequence[tuple[int, ...]], rank: int,
                min_rate: float = MIN_COMPRESSION_RATE) -> BucketLayout:
    """The layout of one bucket whose gradients have ``shapes`` (in bucket order).

    A tensor of two or more dimensions is the matrix (shape[0], the rest), as torch views it.
    """
    if rank < 1:
        raise ValueError(f"PowerSGD rank must be positive, got {rank}")
    matrices: list[MatrixSlot] = []
    vectors: list[tuple[int, int]] = []
    p_off = q_off = e_off = 0
    for i, shape in enumerate(shapes):
        numel = prod(shape)
        if len(shape) > 1 and numel:
            rows, cols = shape[0], numel // shape[0]
            r = min(rows, cols, rank)
            if compresses(rows, cols, r, min_rate):
                matrices.append(MatrixSlot(i, rows, cols, r, p_off, q_off, e_off))
                p_off += rows * r
                q_off += cols * r
                e_off += numel
                continue
        vectors.append((i, numel))
    packed = []
    for i, numel in vectors:
        packed.append(VectorSlot(i, p_off, numel))
        p_off += numel
    return BucketLayout(tuple(tuple(s) for s in shapes), tuple(matrices), tuple(packed),
                        p_off, q_off, e_off)


@dataclass
class _Buffers:
    """One bucket's state across steps."""

    layout: BucketLayout
    packed: torch.Tensor  # Pᵀ factors then uncompressed tensors
    qt: torch.Tensor      # Qᵀ factors
    error: torch.Tensor
    views: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = field(default_factory=list)


class PowerSGD:
    """Per-process PowerSGD state: the step count and each bucket's error and factors.

    ``start_iter`` steps run plain fp32 all-reduce first: DDP rebuilds its buckets after the
    first step, and the error feedback should start from settled gradients (torch's rule).
    ``seed`` makes the initial Q the same on every rank without a broadcast.
    """

    def __init__(self, rank: int, *, start_iter: int = 2, min_rate: float = MIN_COMPRESSION_RATE,
                 seed: int = 0, process_group: Any = None) -> None:
        if rank < 1:
            raise ValueError(f"PowerSGD rank must be positive, got {rank}")
        self.rank = rank
        self.start_iter = start_iter
        self.min_rate = min_rate
        self.seed = seed
        self.process_group = process_group
        self.iter = 0
        self._buckets: dict[int, _Buffers] = {}

    def buffers(self, index: int, grads: Sequence[torch.Tensor]) -> _Buffers:
        """Bucket ``index``'s buffers, made on first use or when DDP rebuilt the bucket."""
        shapes = tuple(tuple(g.shape) for g in grads)
        have = self._buckets.get(index)
        if have is not None and have.layout.shapes == shapes:
            return have
        layout = plan_bucket(shapes, self.rank, self.min_rate)
        like = grads[0]
        b = _Buffers(layout,
                     packed=torch.empty(layout.p_numel, dtype=like.dtype, device=like.device),
                     qt=torch.empty(layout.q_numel, dtype=like.dtype, device=like.device),
                     error=torch.zeros(layout.e_numel, dtype=like.dtype, device=like.device))
        # the warm start's first Q: random, identical on every rank (same seed, same bucket)
        gen = torch.Generator(device="cpu").manual_seed(self.seed * 1_000_003 + index)
        b.qt.copy_(torch.randn(layout.q_numel, generator=gen, dtype=like.dtype))
        for m in layout.matrices:
            b.views.append((
                b.packed[m.p_offset:m.p_offset + m.rank * m.rows].view(m.rank, m.rows),
                b.qt[m.q_offset:m.q_offset + m.rank * m.cols].view(m.rank, m.cols),
                b.error[m.e_offset:m.e_offset + m.rows * m.cols].view(m.rows, m.cols),
            ))
        self._buckets[index] = b
        return b

    def step(self, bucket: Any, group: Any) -> torch.Tensor:
        """Compress, all-reduce and decompress one bucket in place; returns its buffer."""
        import torch.distributed as dist

        world = dist.get_world_size(group)
        grads: list[torch.Tensor] = bucket.gradients()
        b = self.buffers(bucket.index(), grads)
        layout = b.layout
        for m, (pt, qt, err) in zip(layout.matrices, b.views, strict=True):
            err.add_(grads[m.index].view(m.rows, m.cols))  # M' = M + last step's error
            torch.mm(qt, err.t(), out=pt)                  # Pᵀ = Qᵀ·M'ᵀ
        for v in layout.vectors:
            b.packed[v.offset:v.offset + v.numel].copy_(grads[v.index].reshape(-1))
        dist.all_reduce(b.packed, group=group)
        for v in layout.vectors:
            grads[v.index].view(-1).copy_(b.packed[v.offset:v.offset + v.numel]).div_(world)
        for pt, qt, err in b.views:
            orthonormalise_rows(pt)
            torch.mm(pt, err, out=qt)                       # Qᵀ = Pᵀ·M'
        dist.all_reduce(b.qt, group=group)
        b.qt.div_(world)
        for m, (pt, qt, err) in zip(layout.matrices, b.views, strict=True):
            approx = grads[m.index].view(m.rows, m.cols)
            torch.mm(pt.t(), qt, out=approx)                # P·Qᵀ, the averaged gradient
            err.sub_(approx)                                # what it missed, sent next step
        buffer: torch.Tensor = bucket.buffer()
        return buffer


def orthonormalise_rows(pt: torch.Tensor) -> None:
    """Make the rows of ``pt`` (r×n) orthonormal in place (Q of the QR of its transpose)."""
    low = pt.dtype in (torch.float16, torch.bfloat16)  # QR needs fp32
    q, _ = torch.linalg.qr(pt.t().float() if low else pt.t())
    pt.copy_(q.t())


def powersgd_hook(state: PowerSGD, bucket: Any) -> torch.futures.Future[Any]:
    """The DDP comm hook: plain averaged all-reduce for ``start_iter`` steps, then PowerSGD."""
    import torch.distributed as dist

    group = state.process_group if state.process_group is not None else dist.group.WORLD
    if state.iter < state.start_iter:
        buffer: torch.Tensor = bucket.buffer()
        buffer.div_(dist.get_world_size(group))
        fut = dist.all_reduce(buffer, group=group, async_op=True).get_future()
        result: torch.futures.Future[Any] = fut.then(lambda f: f.value()[0])
    else:
        result = torch.futures.Future()
        result.set_result(state.step(bucket, group))
    if bucket.is_last():
        state.iter += 1
    return result


# DDP inspects a hook's annotations and wants the real GradBucket/Future classes; under
# `from __future__ import annotations` they are strings, so present none at all
powersgd_hook.__annotations__ = {}
