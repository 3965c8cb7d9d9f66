"""One of two real gloo ranks driving ddpnet's PowerSGD hook on a bucket-shaped stand-in, with
rank 0 checking every step against the algorithm written out plainly from both ranks' inputs
(which it regenerates from their seeds). ``python powersgd_worker.py RANK FILE``; rank 0
prints one JSON line of measured differences."""

from __future__ import annotations

import json
import os
import sys
from math import prod
from typing import Any

import torch
import torch.distributed as dist

from ddpnet.train.powersgd import PowerSGD, plan_bucket, powersgd_hook

WORLD = 2
SHAPES = [(40, 30), (30,), (16, 100), (3, 5), (24, 8, 2)]


class Bucket:
    """What the hook uses of DDP's GradBucket: one flat buffer and per-gradient views of it."""

    def __init__(self, index: int, values: list[torch.Tensor], last: bool = True) -> None:
        self.flat = torch.cat([v.reshape(-1) for v in values]).clone()
        self.views, off = [], 0
        for v in values:
            self.views.append(self.flat[off:off + v.numel()].view(v.shape))
            off += v.numel()
        self._index, self._last = index, last

    def buffer(self) -> torch.Tensor:
        return self.flat

    def gradients(self) -> list[torch.Tensor]:
        return self.views

    def index(self) -> int:
        return self._index

    def is_last(self) -> bool:
        return self._last


def grads(rank: int, step: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * rank + step)
    return [torch.randn(s, generator=g) for s in SHAPES]


def run(state: PowerSGD, steps: int, index: int = 0) -> dict[str, Any]:
    """``steps`` steps on this rank; rank 0 also replays them with the plain algorithm."""
    rank = dist.get_rank()
    layout = plan_bucket(SHAPES, state.rank, state.min_rate)
    errors = [[torch.zeros(m.rows, m.cols) for m in layout.matrices] for _ in range(WORLD)]
    qts: list[torch.Tensor] | None = None
    worst, worst_vs_mean, applied_sum, true_sum = 0.0, 0.0, None, None
    for step in range(steps):
        compressed = state.iter >= state.start_iter
        if compressed and qts is None:  # the hook's first Q, to start the reference from
            bufs = state.buffers(index, grads(rank, step))
            qts = [qt.clone() for _, qt, _ in bufs.views]
        bucket = Bucket(index, grads(rank, step))
        out = powersgd_hook(state, bucket).wait()
        got = [t.clone() for t in bucket.gradients()]
        assert out.data_ptr() == bucket.buffer().data_ptr()
        if rank != 0:
            continue
        inputs = [grads(r, step) for r in range(WORLD)]
        mean = [sum(inp[i] for inp in inputs) / WORLD for i in range(len(SHAPES))]
        want = [m.clone() for m in mean]
        if compressed:
            assert qts is not None
            for k, m in enumerate(layout.matrices):
                ms = [inputs[r][m.index].reshape(m.rows, m.cols) + errors[r][k]
                      for r in range(WORLD)]
                p = sum(x @ qts[k].t() for x in ms)          # P = sum_r M_r Q
                p = torch.linalg.qr(p).Q                      # orthonormal columns
                q = sum(x.t() @ p for x in ms) / WORLD        # Q = mean_r M_rᵀ P
                approx = p @ q.t()
                for r in range(WORLD):
                    errors[r][k] = ms[r] - approx
                qts[k] = q.t().contiguous()                   # the next step's warm start
                want[m.index] = approx.reshape(SHAPES[m.index])
        worst = max(worst, max(float((a - b).abs().max()) for a, b in zip(got, want, strict=True)))
        worst_vs_mean = max(worst_vs_mean,
                            max(float((a - b).abs().max()) for a, b in zip(got, mean, strict=True)))
        applied = torch.cat([t.reshape(-1) for t in got])
        truth = torch.cat([t.reshape(-1) for t in mean])
        applied_sum = applied if applied_sum is None else applied_sum + applied
        true_sum = truth if true_sum is None else true_sum + truth
    if rank != 0:
        return {}
    assert applied_sum is not None and true_sum is not None
    # error feedback loses nothing: what was applied plus what the ranks still hold (their
    # mean error, placed where the matrices are) is what plain averaging would have applied
    held = torch.zeros_like(true_sum)
    offsets = [0]
    for s in SHAPES:
        offsets.append(offsets[-1] + prod(s))
    for k, m in enumerate(layout.matrices):
        mean_err = sum(errors[r][k] for r in range(WORLD)) / WORLD
        held[offsets[m.index]:offsets[m.index + 1]] = mean_err.reshape(-1)
    return {"vs_reference": worst, "vs_plain_mean": worst_vs_mean,
            "feedback_gap": float((applied_sum + held - true_sum).abs().max()),
            "compressed": len(layout.matrices), "iter": state.iter}


def main() -> int:
    rank, path = int(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=WORLD)
    report = {
        "low_rank": run(PowerSGD(4, start_iter=0), steps=4),
        "full_rank": run(PowerSGD(100, start_iter=0, min_rate=0.0), steps=2, index=1),
        "warm_up": run(PowerSGD(2, start_iter=2), steps=4, index=2),
    }
    dist.destroy_process_group()
    if rank == 0:
        os.write(1, (json.dumps(report) + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
