"""DDP communication hooks and the bytes each one hands to all-reduce.

``none`` keeps DDP's built-in fp32 all-reduce; ``fp16``/``bf16`` cast each gradient bucket to
16 bits before the all-reduce and back after (half the traffic, same optimizer maths in fp32;
torch's algorithm, on any backend);
``powersgd`` sends a rank-r factorisation P·Qᵀ of each gradient matrix with error feedback
(traffic ∝ (rows+cols)·r instead of rows·cols), and plain fp32 for vectors and for matrices
where the factorisation would not compress by at least ``min_compression_rate``: on gloo
ddpnet's own implementation (:mod:`ddpnet.train.powersgd`, which says why), on NCCL torch's.

On gloo with the watch on, whichever hook runs is wrapped by :func:`timed_hook`, which tells
the watch when each bucket's all-reduce was launched and when its future completed: gloo's
Flight Recorder gives DDP's bucket all-reduces no end time, so without it a rank slow
*before* backward (data, forward) would make the others wait where nothing measures it, and
the straggler analysis (:mod:`ddpnet.watch.straggler`) would name nobody. ``none`` is then
torch's ``allreduce_hook``, DDP's built-in algorithm in Python (divide, all-reduce).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from math import prod
from typing import Any

import torch

from ddpnet.train.powersgd import MIN_COMPRESSION_RATE, PowerSGD, plan_bucket, powersgd_hook

#: what :func:`timed_hook` reports each bucket's collective span to: (launched, completed)
OnSpan = Callable[[float, float], None]
Hook = Callable[[Any, Any], "torch.futures.Future[Any]"]


@dataclass(frozen=True)
class HookPlan:
    name: str
    bytes_per_step: int
    #: what the bytes figure counts, for the summary
    note: str


def allreduce_bytes(shapes: Iterable[tuple[int, ...]], hook: str, *, powersgd_rank: int = 4,
                    grad_bytes: int = 4) -> int:
    """Bytes one rank hands to all-reduce per optimizer step (steady state; the wire carries
    about 2(n-1)/n times this in a ring). ``shapes`` are the trainable parameters' shapes."""
    total = 0
    for shape in shapes:
        numel = prod(shape)
        if hook in ("fp16", "bf16"):
            total += 2 * numel
        elif hook == "powersgd":
            total += grad_bytes * plan_bucket([shape], powersgd_rank).numel_sent
        else:
            total += grad_bytes * numel
    return total


def low_precision_hook(dtype: torch.dtype) -> Callable[[Any, Any], torch.futures.Future[Any]]:
    """A DDP comm hook that all-reduces each bucket in ``dtype`` (fp16 or bf16).

    The same algorithm as torch's ``fp16_compress_hook``/``bf16_compress_hook``: cast, divide
    by the world size, all-reduce asynchronously, cast back into the bucket. Ours exists
    because torch refuses its bf16 hook unless the backend is NCCL (or XCCL), while gloo on
    CPU all-reduces bf16 tensors fine, and CPU clusters on 1 Gb/s links are exactly where
    halving the traffic pays. The 16-bit copy of each bucket is kept from step to step:
    torch's allocates it every step, and on CPU a fresh tensor of tens of MB costs page
    faults.
    """
    import torch.distributed as dist

    kept: dict[int, torch.Tensor] = {}

    def hook(process_group: Any, bucket: Any) -> torch.futures.Future[Any]:
        group = process_group if process_group is not None else dist.group.WORLD
        buffer: torch.Tensor = bucket.buffer()
        compressed = kept.get(bucket.index())
        if compressed is None or compressed.numel() != buffer.numel() \
                or compressed.device != buffer.device:
            compressed = kept[bucket.index()] = torch.empty_like(buffer, dtype=dtype)
        compressed.copy_(buffer).div_(dist.get_world_size(group))
        fut = dist.all_reduce(compressed, group=group, async_op=True).get_future()

        def decompress(done: torch.futures.Future[Any]) -> torch.Tensor:
            buffer.copy_(done.value()[0])
            return buffer

        result: torch.futures.Future[Any] = fut.then(decompress)
        return result

    hook.__name__ = f"ddpnet_{str(dtype).removeprefix('torch.')}_compress_hook"
    # DDP inspects a hook's annotations and wants the real GradBucket/Future classes; under
    # `from __future__ import annotations` they are strings, so present none at all
    hook.__annotations__ = {}
    return hook


def powersgd_impl(backend: str) -> str:
    """Whose PowerSGD runs on ``backend``: ours on gloo (CPU, see :mod:`.powersgd`), torch's
    where it was built for (NCCL on GPUs: asynchronous, its collectives ordered by CUDA
    streams)."""
    return "ddpnet" if backend == "gloo" else "torch"


def timed_hook(inner: Hook, on_span: OnSpan,
               clock: Callable[[], float] = time.time) -> Hook:
    """``inner`` (any DDP comm hook: DDP calls it with its state and a bucket), reporting each
    bucket's span from the hook's call (the all-reduce is launched) to its future's
    completion. Returns ``inner``'s own future untouched; the callback runs on the backend's
    thread when the collective completes (two clock reads and a deque append per bucket)."""

    def hook(state: Any, bucket: Any) -> torch.futures.Future[Any]:
        start = clock()
        fut = inner(state, bucket)
        fut.add_done_callback(lambda _done: on_span(start, clock()))
        return fut

    hook.__name__ = f"timed_{getattr(inner, '__name__', 'hook')}"
    hook.__annotations__ = {}  # see low_precision_hook: DDP reads them
    return hook


def watch_timing(backend: str) -> OnSpan | None:
    """Where to report bucket all-reduce spans: the watch's recorder on gloo while the watch
    runs; None otherwise (NCCL's Flight Recorder times its collectives, and an NCCL work's
    future completes when the kernel is queued, not when it ends)."""
    from ddpnet.watch import session

    if backend != "gloo" or not session.active():
        return None
    return session.recorder().add_wait


def _hook_for(name: str, backend: str, powersgd_rank: int, start_iter: int,
              timed: bool) -> tuple[Any, Hook | None, str]:
    """The (state, hook) DDP gets for ``name`` (hook None: DDP's built-in all-reduce) and
    whose implementation it is."""
    if name in ("fp16", "bf16"):
        return None, low_precision_hook(torch.float16 if name == "fp16" else torch.bfloat16), ""
    if name == "powersgd":
        impl = powersgd_impl(backend)
        if impl == "ddpnet":
            return PowerSGD(powersgd_rank, start_iter=start_iter), powersgd_hook, impl
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

        state = psgd.PowerSGDState(
            process_group=None, matrix_approximation_rank=powersgd_rank,
            start_powerSGD_iter=start_iter, min_compression_rate=MIN_COMPRESSION_RATE,
            use_error_feedback=True, warm_start=True)
        return state, psgd.powerSGD_hook, impl
    if name != "none":
        raise ValueError(f"unknown comm hook {name!r}")
    if not timed:
        return None, None, ""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    return None, allreduce_hook, ""


def register_hook(ddp: Any, name: str, *, powersgd_rank: int, start_iter: int,
                  timing: OnSpan | None = None) -> HookPlan:
    """Register hook ``name`` on ``ddp`` (a DistributedDataParallel); with ``timing``, wrapped
    by :func:`timed_hook` (``none`` becomes torch's ``allreduce_hook`` to be wrapped)."""
    import torch.distributed as dist

    shapes = [tuple(p.shape) for p in ddp.module.parameters() if p.requires_grad]
    backend = str(dist.get_backend()) if name == "powersgd" else ""
    state, hook, impl = _hook_for(name, backend, powersgd_rank, start_iter, timing is not None)
    if hook is not None:
        ddp.register_comm_hook(state, hook if timing is None else timed_hook(hook, timing))
    notes = {
        "none": "fp32 gradients, DDP's built-in all-reduce" if timing is None else
                "fp32 gradients, DDP's all-reduce as torch's allreduce_hook (timed for the watch)",
        "fp16": "gradients cast to fp16 per bucket",
        "bf16": "gradients cast to bf16 per bucket",
        "powersgd": f"rank-{powersgd_rank} P and Q factors plus uncompressed tensors "
                    f"(after {start_iter} warm-up steps of plain fp32; {impl}'s hook)",
    }
    return HookPlan(name, allreduce_bytes(shapes, name, powersgd_rank=powersgd_rank),
                    notes[name])


def grad_dtype_bytes(model: torch.nn.Module) -> int:
    return next(p for p in model.parameters()).element_size()
