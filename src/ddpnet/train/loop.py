"""The training loop: the guides' DDP skeleton with every step done right.

Read top to bottom: seed, data with a DistributedSampler, model wrapped in DDP (bucket size,
static graph, comm hook), resume from the newest checkpoint, then per step: ``no_sync`` for all
but the last micro-batch of a gradient-accumulation group, autocast, GradScaler for fp16, the
optimizer step, metrics, callbacks, and a rank-0 checkpoint every N steps.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from ddpnet.errors import ConfigError
from ddpnet.train import checkpoint as ckpt
from ddpnet.train import hugepages
from ddpnet.train.comm import register_hook
from ddpnet.train.config import TrainConfig
from ddpnet.train.data import NUM_CLASSES, load_dataset, make_loader
from ddpnet.train.dist import Dist
from ddpnet.train.model import build_model, count_parameters
from ddpnet.train.summary import StepCallback, StepEvent, Summary


def autocast_context(amp: str, device: str) -> contextlib.AbstractContextManager[Any]:
    """bf16 autocast on CPU or GPU; fp16 only on CUDA (validated earlier); else nothing."""
    kind = "cuda" if device.startswith("cuda") else "cpu"
    if amp == "bf16":
        return torch.autocast(kind, dtype=torch.bfloat16)
    if amp == "fp16":
        return torch.autocast("cuda", dtype=torch.float16)
    return contextlib.nullcontext()


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _batches(loader: Any, skip: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The epoch's batches after the first ``skip`` (resuming mid-epoch)."""
    return islice(iter(loader), skip, None)


def train(cfg: TrainConfig, d: Dist, *, callbacks: Sequence[StepCallback] = (),
          note: Callable[[str], None] = lambda _msg: None) -> Summary:
    """Train on this rank; every rank calls this with the same ``cfg``."""
    device = d.device
    torch.manual_seed(cfg.seed)  # the same initial weights everywhere (DDP also broadcasts)
    split = load_dataset(cfg.dataset, samples=cfg.samples, eval_samples=cfg.eval_samples,
                         seed=cfg.seed)
    loader, sampler = make_loader(split.train, batch_size=cfg.batch_size, rank=d.rank,
                                  world_size=d.world_size, seed=cfg.seed)
    steps_per_epoch = len(loader) // cfg.grad_accum
    if steps_per_epoch == 0:
        raise ConfigError(
            f"{len(split.train)} training samples are fewer than one global step "
            f"({cfg.batch_size} per rank x {d.world_size} ranks x {cfg.grad_accum} accumulated)",
            "lower --batch-size or --grad-accum, or raise --samples",
        )
    total_steps = cfg.max_steps if cfg.max_steps is not None else cfg.epochs * steps_per_epoch

    model = build_model(cfg.model, cfg.width, cfg.depth, NUM_CLASSES).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
    scaler = torch.amp.GradScaler("cuda", enabled=cfg.amp == "fp16")

    # Resume before DDP wraps the model: DDP broadcasts rank 0's parameters at construction,
    # and rank 0 broadcasts the optimizer/scaler state, so only rank 0 needs the file.
    start_step, resumed_from, notes = 0, None, [f"process group via {d.via}"]
    if device == "cpu":
        notes.append(hugepages.describe(os.environ))
    if cfg.checkpoint_dir:
        start_step, state = _resume(Path(cfg.checkpoint_dir), d, notes)
        if state is not None:
            resumed_from = start_step
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            scaler.load_state_dict(state["scaler"])
            rngs = state["rng"]
            if len(rngs) == d.world_size:
                ckpt.set_rng_state(rngs[d.rank])
            else:
                notes.append(f"world size changed {len(rngs)} -> {d.world_size}: "
                             "RNG states reseeded, data order continues by epoch")
            if state["config"]["batch_size"] != cfg.batch_size or \
                    state["world_size"] != d.world_size:
                notes.append("global batch differs from the checkpoint's: the step count "
                             "continues, the samples seen per step change")
    for line in notes:
        note(line)

    def forward_backward(net: torch.nn.Module, x: torch.Tensor,
                         y: torch.Tensor) -> torch.Tensor:
        with autocast_context(cfg.amp, device):
            loss = F.cross_entropy(net(x), y) / cfg.grad_accum
        scaler.scale(loss).backward()  # type: ignore[no-untyped-call]
        return loss.detach()

    # measured on the bare model, before DDP attaches its gradient hooks
    compute_per_micro = _calibrate(model, loader, forward_backward, optimizer, device)

    ddp = DDP(model, device_ids=[d.local_rank] if device.startswith("cuda") else None,
              bucket_cap_mb=cfg.bucket_cap_mb, static_graph=cfg.static_graph,
              gradient_as_bucket_view=True)
    plan = register_hook(ddp, cfg.comm_hook, powersgd_rank=cfg.powersgd_rank,
                         start_iter=cfg.powersgd_start_iter)

    global_samples = cfg.batch_size * cfg.grad_accum * d.world_size
    # untimed steps: the first builds DDP's buckets, the second rebuilds them in gradient
    # order and allocates the new ones (and a hook's buffers); PowerSGD runs plain all-reduce
    # for start_iter steps, then allocates its factors on the first compressed one
    warmup = cfg.powersgd_start_iter + 1 if cfg.comm_hook == "powersgd" else 2
    timed_steps, timed_wall, sum_compute, sum_comm = 0, 0.0, 0.0, 0.0
    last_loss, step = float("nan"), start_step
    interval_start, interval_steps = time.perf_counter(), 0
    ev_loss, ev_acc = float("nan"), float("nan")
    while step < total_steps:
        epoch, offset = divmod(step, steps_per_epoch)
        sampler.set_epoch(epoch)  # a new shuffle per epoch, the same on every rank
        batches = _batches(loader, offset * cfg.grad_accum)
        while step < total_steps and offset < steps_per_epoch:
            _sync(device)
            t0 = time.perf_counter()
            losses, no_sync_time, sync_time = [], 0.0, 0.0
            for micro in range(cfg.grad_accum):
                x, y = next(batches)
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                last = micro == cfg.grad_accum - 1
                tm = time.perf_counter()
                # no_sync: accumulate locally, all-reduce only on the group's last backward
                with contextlib.nullcontext() if last else ddp.no_sync():
                    losses.append(forward_backward(ddp, x, y))
                _sync(device)
                if last:
                    sync_time = time.perf_counter() - tm
                else:
                    no_sync_time += time.perf_counter() - tm
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            loss_value = float(torch.stack(losses).sum())
            _sync(device)
            step_time = time.perf_counter() - t0
            step += 1
            offset += 1
            if cfg.grad_accum > 1:  # a fresh compute estimate from this step's no_sync passes
                compute_per_micro = no_sync_time / (cfg.grad_accum - 1)
            comm_wait = max(0.0, sync_time - compute_per_micro)
            compute = step_time - comm_wait
            if step > start_step + warmup:  # not the steps that build buckets, warm caches
                timed_steps += 1
                timed_wall += step_time
                sum_compute += compute
                sum_comm += comm_wait
            last_loss = loss_value
            interval_steps += 1
            is_log = step % cfg.log_every == 0 or step == total_steps
            event_extra: dict[str, Any] = {}
            if is_log:
                now = time.perf_counter()
                rate = interval_steps * global_samples / max(now - interval_start, 1e-9)
                glob = _mean_across_ranks(loss_value, device)
                ev_loss, ev_acc = evaluate(ddp.module, split.eval, d, cfg)
                event_extra = {"is_log_step": True, "global_loss": glob, "eval_loss": ev_loss,
                               "eval_accuracy": ev_acc, "samples_per_s": rate}
                last_loss = glob
            event = StepEvent(
                rank=d.rank, world_size=d.world_size, step=step, total_steps=total_steps,
                epoch=epoch, loss=loss_value, global_samples=global_samples,
                step_time_s=step_time, compute_s=compute, comm_wait_s=comm_wait,
                bytes_allreduced=plan.bytes_per_step, **event_extra)
            for callback in callbacks:
                callback(event)
            if is_log:
                interval_start, interval_steps = time.perf_counter(), 0
            if cfg.checkpoint_dir and (step == total_steps or (
                    cfg.checkpoint_every and step % cfg.checkpoint_every == 0)):
                _save(cfg, d, step, ddp.module, optimizer, scaler,
                      sampler={"epoch": (step) // steps_per_epoch,
                               "offset": step % steps_per_epoch,
                               "steps_per_epoch": steps_per_epoch, "seed": cfg.seed})
            if cfg.step_sleep_s:
                time.sleep(cfg.step_sleep_s)

    if math.isnan(ev_loss):
        ev_loss, ev_acc = evaluate(ddp.module, split.eval, d, cfg)
    mean_step = timed_wall / timed_steps if timed_steps else float("nan")
    return Summary(
        steps=step, final_loss=last_loss, eval_loss=ev_loss, eval_accuracy=ev_acc,
        samples_per_s=global_samples / mean_step if timed_steps else float("nan"),
        bytes_per_step=plan.bytes_per_step, bytes_note=plan.note,
        step_time_s=mean_step,
        compute_s=sum_compute / timed_steps if timed_steps else float("nan"),
        comm_wait_s=sum_comm / timed_steps if timed_steps else float("nan"),
        comm_share=sum_comm / timed_wall if timed_wall else float("nan"),
        parameters=count_parameters(model), world_size=d.world_size,
        resumed_from=resumed_from, config=cfg.to_dict(), backend=d.backend, device=device,
        notes=tuple(notes),
    )



def _calibrate(model: torch.nn.Module, loader: Any,
               forward_backward: Callable[..., torch.Tensor],
               optimizer: torch.optim.Optimizer, device: str, passes: int = 3) -> float:
    """Seconds of one forward+backward with no communication, measured on real batches on the
    bare model before training; gradients are discarded. Subtracting it from a synchronising
    DDP backward gives the all-reduce time that backward could not hide."""
    it = iter(loader)
    times = []
    for i in range(passes + 1):
        try:
            x, y = next(it)
        except StopIteration:
            break
        x, y = x.to(device), y.to(device)
        _sync(device)
        t0 = time.perf_counter()
        forward_backward(model, x, y)
        _sync(device)
        if i:  # the first pass warms allocators and kernels
            times.append(time.perf_counter() - t0)
    optimizer.zero_grad(set_to_none=True)
    return sorted(times)[len(times) // 2] if times else 0.0


def _mean_across_ranks(value: float, device: str) -> float:
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return float(t.item()) / dist.get_world_size()


@torch.no_grad()
def evaluate(model: torch.nn.Module, dataset: Any, d: Dist,
             cfg: TrainConfig) -> tuple[float, float]:
    """Loss and accuracy on the whole eval set, sharded over ranks and summed."""
    model.eval()
    x_all, y_all = dataset.tensors
    idx = torch.arange(d.rank, len(x_all), d.world_size)
    loss_sum, correct = 0.0, 0
    for chunk in torch.split(idx, 512):
        x, y = x_all[chunk].to(d.device), y_all[chunk].to(d.device)
        with autocast_context(cfg.amp, d.device):
            logits = model(x)
        loss_sum += float(F.cross_entropy(logits.float(), y, reduction="sum"))
        correct += int((logits.argmax(dim=1) == y).sum())
    model.train()
    totals = torch.tensor([loss_sum, float(correct), float(len(idx))], dtype=torch.float64,
                          device=d.device)
    dist.all_reduce(totals)
    n = max(float(totals[2]), 1.0)
    return float(totals[0]) / n, float(totals[1]) / n


def _resume(directory: Path, d: Dist, notes: list[str]) -> tuple[int, dict[str, Any] | None]:
    """Rank 0 loads the newest complete checkpoint and broadcasts it (no shared disk needed)."""
    payload: list[Any] = [None]
    if d.rank == 0:
        loaded = ckpt.load_newest(directory)
        if loaded is not None:
            payload = [(loaded.step, loaded.state, loaded.skipped, str(loaded.path))]
    if d.world_size > 1:
        dist.broadcast_object_list(payload, src=0)
    if payload[0] is None:
        return 0, None
    step, state, skipped, path = payload[0]
    notes.extend(f"skipped damaged checkpoint {s}" for s in skipped)
    notes.append(f"resumed from {path} (step {step})")
    return int(step), state


def _save(cfg: TrainConfig, d: Dist, step: int, model: torch.nn.Module,
          optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
          sampler: dict[str, int]) -> None:
    """Every rank contributes its RNG state; rank 0 alone writes the file."""
    rngs: list[Any] = [None] * d.world_size
    dist.all_gather_object(rngs, ckpt.rng_state())
    if d.rank != 0:
        return
    assert cfg.checkpoint_dir is not None
    state = {
        "step": step,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict(),
        "rng": rngs,
        "sampler": sampler,
        "world_size": d.world_size,
        "config": cfg.to_dict(),
    }
    ckpt.save_atomic(state, Path(cfg.checkpoint_dir), step, keep=cfg.keep_checkpoints)
