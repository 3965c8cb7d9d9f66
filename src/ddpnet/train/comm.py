"""DDP communication hooks and the bytes each one hands to all-reduce.

``none`` keeps DDP's built-in fp32 all-reduce; ``fp16``/``bf16`` cast each gradient bucket to
16 bits before the all-reduce and back after (half the traffic, same optimizer maths in fp32;
torch's algorithm, on any backend);
``powersgd`` sends a rank-r factorisation P·Qᵀ of each gradient matrix with error feedback
(traffic ∝ (rows+cols)·r instead of rows·cols), and plain fp32 for vectors and for matrices
where the factorisation would not compress by at least ``min_compression_rate``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

#: PowerSGD only compresses a matrix when that saves at least this factor (torch's default)
MIN_COMPRESSION_RATE = 2.0


@dataclass(frozen=True)
class HookPlan:
    name: str
    bytes_per_step: int
    #: what the bytes figure counts, for the summary
    note: str


def powersgd_compresses(rows: int, cols: int, rank: int,
                        min_rate: float = MIN_COMPRESSION_RATE) -> bool:
    """torch's ``_should_compress``: factorise only when it saves ``min_rate``x."""
    return (rows + cols) * rank * min_rate < rows * cols


def allreduce_bytes(shapes: Iterable[tuple[int, ...]], hook: str, *, powersgd_rank: int = 4,
                    grad_bytes: int = 4) -> int:
    """Bytes one rank hands to all-reduce per optimizer step (steady state; the wire carries
    about 2(n-1)/n times this in a ring). ``shapes`` are the trainable parameters' shapes."""
    total = 0
    for shape in shapes:
        numel = 1
        for dim in shape:
            numel *= dim
        if hook in ("fp16", "bf16"):
            total += 2 * numel
        elif hook == "powersgd" and len(shape) > 1:
            rows, cols = shape[0], numel // shape[0]
            if powersgd_compresses(rows, cols, powersgd_rank):
                total += grad_bytes * (rows + cols) * powersgd_rank
            else:
                total += grad_bytes * numel
        else:
            total += grad_bytes * numel
    return total


def low_precision_hook(dtype: torch.dtype) -> Callable[[Any, Any], torch.futures.Future[Any]]:
    """A DDP comm hook that all-reduces each bucket in ``dtype`` (fp16 or bf16).

    The same algorithm as torch's ``fp16_compress_hook``/``bf16_compress_hook``: divide by
    the world size, cast, all-reduce asynchronously, cast back into the bucket. Ours exists
    because torch refuses its bf16 hook unless the backend is NCCL (or XCCL), while gloo on
    CPU all-reduces bf16 tensors fine, and CPU clusters on 1 Gb/s links are exactly where
    halving the traffic pays.
    """
    import torch.distributed as dist

    def hook(process_group: Any, bucket: Any) -> torch.futures.Future[Any]:
        group = process_group if process_group is not None else dist.group.WORLD
        buffer: torch.Tensor = bucket.buffer()
        compressed = buffer.to(dtype).div_(dist.get_world_size(group))
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


def _in_order(hook: Callable[[Any, Any], torch.futures.Future[Any]]
              ) -> Callable[[Any, Any], torch.futures.Future[Any]]:
    """Run a multi-collective hook to completion before DDP's next bucket starts.

    PowerSGD issues its second and third all-reduces from future callbacks. With several
    buckets those callbacks can fire in a different order on different ranks; gloo matches
    collectives by issue order, so the ranks then wait on each other forever (seen on a
    4-node lab with a 25M-parameter model). DDP calls the hook for bucket i+1 only after
    bucket i on every rank, so waiting inside the hook keeps the order identical everywhere;
    PowerSGD's traffic is small, so the lost overlap costs little.
    """

    def ordered(state: Any, bucket: Any) -> torch.futures.Future[Any]:
        value = hook(state, bucket).wait()
        done: torch.futures.Future[Any] = torch.futures.Future()
        done.set_result(value)
        return done

    ordered.__name__ = f"{hook.__name__}_in_order"
    ordered.__annotations__ = {}  # see low_precision_hook
    return ordered


def register_hook(ddp: Any, name: str, *, powersgd_rank: int, start_iter: int) -> HookPlan:
    """Register hook ``name`` on ``ddp`` (a DistributedDataParallel)."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

    shapes = [tuple(p.shape) for p in ddp.module.parameters() if p.requires_grad]
    if name == "fp16":
        ddp.register_comm_hook(None, low_precision_hook(torch.float16))
    elif name == "bf16":
        ddp.register_comm_hook(None, low_precision_hook(torch.bfloat16))
    elif name == "powersgd":
        state = psgd.PowerSGDState(
            process_group=None, matrix_approximation_rank=powersgd_rank,
            start_powerSGD_iter=start_iter, min_compression_rate=MIN_COMPRESSION_RATE,
            use_error_feedback=True, warm_start=True)
        import torch.distributed as dist

        if dist.get_backend() == "gloo":
            ddp.register_comm_hook(state, _in_order(psgd.powerSGD_hook))
        else:
            ddp.register_comm_hook(state, psgd.powerSGD_hook)
    elif name != "none":
        raise ValueError(f"unknown comm hook {name!r}")
    notes = {
        "none": "fp32 gradients, DDP's built-in all-reduce",
        "fp16": "gradients cast to fp16 per bucket",
        "bf16": "gradients cast to bf16 per bucket",
        "powersgd": f"rank-{powersgd_rank} P and Q factors plus uncompressed tensors "
                    f"(after {start_iter} warm-up steps of plain fp32)",
    }
    return HookPlan(name, allreduce_bytes(shapes, name, powersgd_rank=powersgd_rank),
                    notes[name])


def grad_dtype_bytes(model: torch.nn.Module) -> int:
    return next(p for p in model.parameters()).element_size()
