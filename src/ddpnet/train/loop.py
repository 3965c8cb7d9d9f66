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
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from ddpnet.errors import ConfigError
from ddpnet.train import hugepages
from ddpnet.train.comm import HookPlan, register_hook, watch_timing
from ddpnet.train.config import TrainConfig
from ddpnet.train.data import NUM_CLASSES, Split, load_dataset, make_loader
from ddpnet.train.defaults import sizes_for
from ddpnet.train.dist import Dist
from ddpnet.train.model import build_model, count_parameters
from ddpnet.train.optim import OptimPlan, divergence, plan
from ddpnet.train.peaks import utilisation
from ddpnet.train.precision import flops_per_step, precision_label, precision_note
from ddpnet.train.preempt import Preempted, StopChecks, StopRequest
from ddpnet.train.resume import checkpoint_path, due, restore, save
from ddpnet.train.summary import StepCallback, StepEvent, Summary
from ddpnet.watch.session import phase
from ddpnet.watch.session import step as mark_step


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


@dataclass(frozen=True)
class Parts:
    """What a run trains with, built in the guides' order (data, then model, optimizer and
    scaler) after the seed, so every rank starts from the same weights."""

    split: Split
    loader: Any
    sampler: Any
    steps_per_epoch: int
    total_steps: int
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    plan: OptimPlan


def train(cfg: TrainConfig, d: Dist, *, callbacks: Sequence[StepCallback] = (),
          note: Callable[[str], None] = lambda _msg: None,
          stop: StopRequest | None = None) -> Summary:
    """Train on this rank; every rank calls this with the same ``cfg``. With ``stop``, a
    signal to any rank ends every rank after the same step with a checkpoint
    (:class:`ddpnet.train.preempt.Preempted`)."""
    torch.manual_seed(cfg.seed)  # the same initial weights everywhere (DDP also broadcasts)
    parts = build(cfg, d)
    notes = [f"process group via {d.via}", *setup_notes(cfg, d.device)]
    if d.device == "cpu":
        notes.append(hugepages.describe(os.environ))
    # Resume before DDP wraps the model: DDP broadcasts rank 0's parameters at construction,
    # and rank 0 broadcasts the optimizer/scaler state, so only rank 0 needs the file.
    with phase("warmup"):  # the watch's allowance: load, compile, calibrate, DDP's broadcast
        resumed_from = restore(cfg, d, parts.model, parts.optimizer, parts.scaler, notes)
        for line in notes:
            note(line)
        if cfg.compile:  # in place: the module keeps its type and its state_dict keys
            parts.model.compile()
        forward_backward = make_forward_backward(cfg, parts.scaler, d.device)
        # measured on the bare model, before DDP attaches its gradient hooks
        compute_per_micro = _calibrate(parts.model, parts.loader, forward_backward,
                                       parts.optimizer, d.device)
        ddp = DDP(parts.model,
                  device_ids=[d.local_rank] if d.device.startswith("cuda") else None,
                  bucket_cap_mb=cfg.bucket_cap_mb, static_graph=cfg.static_graph,
                  gradient_as_bucket_view=True)
    plan = register_hook(ddp, cfg.comm_hook, powersgd_rank=cfg.powersgd_rank,
                         start_iter=cfg.powersgd_start_iter, timing=watch_timing(d.backend))
    loop = Loop(cfg, d, parts, ddp, plan, forward_backward, callbacks,
                start_step=0 if resumed_from is None else resumed_from,
                compute_per_micro=compute_per_micro, stop=stop)
    loop.run()
    return loop.summary(resumed_from, notes)


def build(cfg: TrainConfig, d: Dist) -> Parts:
    """Data over this rank's shard, the model on this rank's device, SGD and the scaler;
    a ConfigError when the data is smaller than one global step."""
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
    set_matmul_precision(cfg.tf32, d.device)
    model = build_model(cfg.model, cfg.width, cfg.depth, NUM_CLASSES).to(d.device)
    p = plan(cfg.model, total_steps, optimizer=cfg.optimizer, lr=cfg.lr,
             momentum=cfg.momentum, warmup_steps=cfg.warmup_steps, clip=cfg.clip_grad)
    scaler = torch.amp.GradScaler("cuda", enabled=cfg.amp == "fp16")
    return Parts(split, loader, sampler, steps_per_epoch, total_steps, model,
                 make_optimizer(model, p, fused=d.device.startswith("cuda")), scaler, p)


def make_optimizer(model: torch.nn.Module, p: OptimPlan, *,
                   fused: bool = False) -> torch.optim.Optimizer:
    """SGD with momentum, or AdamW (decoupled weight decay), as the plan says. ``fused`` (on
    CUDA): one kernel updates every parameter instead of a few per tensor (torch's fused
    AdamW/SGD; GradScaler supports both); CPU keeps torch's default (foreach)."""
    if p.optimizer == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=p.lr, weight_decay=p.weight_decay,
                                 fused=fused or None)
    return torch.optim.SGD(model.parameters(), lr=p.lr, momentum=p.momentum,
                           weight_decay=p.weight_decay, fused=fused or None)


def set_matmul_precision(tf32: bool, device: str) -> None:
    """On CUDA, fp32 matmuls and convolutions run on TF32 tensor cores (``--tf32``, the
    default: 10-bit mantissa products, fp32 accumulation; ~7x an H100's fp32 rate) or in full
    fp32 (``--no-tf32``). Autocast's bf16/fp16 matmuls are unaffected. A CPU has no TF32."""
    if not device.startswith("cuda"):
        return
    mode = "tf32" if tf32 else "ieee"
    torch.backends.cuda.matmul.fp32_precision = mode
    torch.backends.cudnn.conv.fp32_precision = mode  # type: ignore[attr-defined]


def setup_notes(cfg: TrainConfig, device: str) -> list[str]:
    """What the run chose for the user: its size (where the device's defaults set it), its
    fp32 matmul mode on CUDA, fused optimizer kernels, torch.compile."""
    notes = []
    if cfg.sized_by != "flags":
        s = sizes_for(cfg.model, device)
        notes.append(f"{cfg.sized_by}: width {cfg.width}, depth {cfg.depth}, batch "
                     f"{cfg.batch_size}, samples {cfg.samples} ({s.reason})")
    if device.startswith("cuda"):
        matmuls = ("fp32 matmuls on TF32 tensor cores (--no-tf32: full fp32)" if cfg.tf32
                   else "fp32 matmuls in full fp32 (--no-tf32)")
        notes.append(f"{matmuls}; fused optimizer kernels")
    if cfg.compile:
        notes.append("torch.compile: the first steps compile (tens of seconds)")
    return notes


ForwardBackward = Callable[[torch.nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]


def make_forward_backward(cfg: TrainConfig, scaler: torch.amp.GradScaler,
                          device: str) -> ForwardBackward:
    """One micro-batch: forward under autocast, loss scaled for accumulation (and by the
    GradScaler for fp16), backward; returns the detached loss."""

    def forward_backward(net: torch.nn.Module, x: torch.Tensor,
                         y: torch.Tensor) -> torch.Tensor:
        with phase("forward"), autocast_context(cfg.amp, device):
            loss = F.cross_entropy(net(x), y) / cfg.grad_accum
        with phase("backward"):
            scaler.scale(loss).backward()  # type: ignore[no-untyped-call]
        return loss.detach()

    return forward_backward


@dataclass(frozen=True)
class StepTimes:
    """One optimizer step as measured: the summed loss, the wall time, and the time of the
    no_sync micro-batches and of the synchronising one."""

    loss: float
    step_time: float
    no_sync_time: float
    sync_time: float


@dataclass
class Meter:
    """Step timing: the averages over the timed steps (not the warm-up ones) and the
    current log interval's start, for the samples/s of each log line."""

    timed_steps: int = 0
    timed_wall: float = 0.0
    sum_compute: float = 0.0
    sum_comm: float = 0.0
    interval_start: float = field(default_factory=time.perf_counter)
    interval_steps: int = 0

    def add(self, step_time: float, compute: float, comm_wait: float) -> None:
        self.timed_steps += 1
        self.timed_wall += step_time
        self.sum_compute += compute
        self.sum_comm += comm_wait

    def interval_rate(self, global_samples: int) -> float:
        elapsed = max(time.perf_counter() - self.interval_start, 1e-9)
        return self.interval_steps * global_samples / elapsed

    def new_interval(self) -> None:
        self.interval_start, self.interval_steps = time.perf_counter(), 0

    def mean(self, total: float) -> float:
        return total / self.timed_steps if self.timed_steps else float("nan")


class Loop:
    """The steps of one run, from ``start_step`` to the total: per step ``no_sync`` for all
    but the last micro-batch, the optimizer step, timing, metrics on log steps, callbacks
    and checkpoints."""

    def __init__(self, cfg: TrainConfig, d: Dist, parts: Parts, ddp: DDP, plan: HookPlan,
                 forward_backward: ForwardBackward, callbacks: Sequence[StepCallback], *,
                 start_step: int, compute_per_micro: float,
                 stop: StopRequest | None = None) -> None:
        self.cfg, self.d, self.parts, self.ddp, self.plan = cfg, d, parts, ddp, plan
        self.stops = None if stop is None else StopChecks(stop, d.device)
        self.forward_backward = forward_backward
        self.callbacks = callbacks
        self.start_step = self.step = start_step
        self.compute_per_micro = compute_per_micro
        self.global_samples = cfg.batch_size * cfg.grad_accum * d.world_size
        # untimed steps: the first builds DDP's buckets, the second rebuilds them in gradient
        # order and allocates the new ones (and a hook's buffers); PowerSGD runs plain
        # all-reduce for start_iter steps, then allocates its factors on the first compressed
        self.warmup = cfg.powersgd_start_iter + 1 if cfg.comm_hook == "powersgd" else 2
        self.meter = Meter()
        self.last_loss = float("nan")
        self.ev_loss, self.ev_acc = float("nan"), float("nan")

    def run(self) -> None:
        spe = self.parts.steps_per_epoch
        while self.step < self.parts.total_steps:
            epoch, offset = divmod(self.step, spe)
            self.parts.sampler.set_epoch(epoch)  # a new shuffle per epoch, the same everywhere
            batches = _batches(self.parts.loader, offset * self.cfg.grad_accum)
            first = True  # the epoch's first batch starts the data loader's workers
            while self.step < self.parts.total_steps and offset < spe:
                warm = first or self.step < self.start_step + self.warmup
                with phase("warmup") if warm else contextlib.nullcontext():
                    self.one_step(epoch, batches)
                first = False
                offset += 1
                self.preempt_point()

    def one_step(self, epoch: int, batches: Iterator[tuple[torch.Tensor, torch.Tensor]]
                 ) -> None:
        mark_step(self.step + 1)  # the watch's step marker (its times feed the straggler analysis)
        times = self.optimizer_step(batches)
        self.step += 1
        cfg = self.cfg
        if cfg.grad_accum > 1:  # a fresh compute estimate from this step's no_sync passes
            self.compute_per_micro = times.no_sync_time / (cfg.grad_accum - 1)
        comm_wait = max(0.0, times.sync_time - self.compute_per_micro)
        compute = times.step_time - comm_wait
        if self.step > self.start_step + self.warmup:  # not the bucket-building steps
            self.meter.add(times.step_time, compute, comm_wait)
        self.last_loss = times.loss
        self.meter.interval_steps += 1
        is_log = self.step % cfg.log_every == 0 or self.step == self.parts.total_steps
        extra = self.log_metrics(times.loss) if is_log else {}
        event = StepEvent(
            rank=self.d.rank, world_size=self.d.world_size, step=self.step,
            total_steps=self.parts.total_steps, epoch=epoch, loss=times.loss,
            global_samples=self.global_samples, step_time_s=times.step_time,
            compute_s=compute, comm_wait_s=comm_wait,
            bytes_allreduced=self.plan.bytes_per_step, **extra)
        for callback in self.callbacks:
            callback(event)
        if is_log:
            self.meter.new_interval()
        self.checkpoint()
        if cfg.step_sleep_s:
            time.sleep(cfg.step_sleep_s)

    def optimizer_step(self, batches: Iterator[tuple[torch.Tensor, torch.Tensor]]
                       ) -> StepTimes:
        """``grad_accum`` micro-batches (all-reduce on the last one only), then the
        optimizer step."""
        device, accum = self.d.device, self.cfg.grad_accum
        _sync(device)
        t0 = time.perf_counter()
        losses, no_sync_time, sync_time = [], 0.0, 0.0
        for micro in range(accum):
            with phase("data"):
                x, y = next(batches)
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            last = micro == accum - 1
            tm = time.perf_counter()
            # no_sync: accumulate locally, all-reduce only on the group's last backward
            with contextlib.nullcontext() if last else self.ddp.no_sync():
                losses.append(self.forward_backward(self.ddp, x, y))
            _sync(device)
            if last:
                sync_time = time.perf_counter() - tm
            else:
                no_sync_time += time.perf_counter() - tm
        loss = float(torch.stack(losses).sum())
        with phase("step"):
            self.apply_update(loss)
        _sync(device)
        return StepTimes(loss, time.perf_counter() - t0, no_sync_time, sync_time)

    def apply_update(self, loss: float) -> None:
        """This step's learning rate, the gradient norm (clipped where the plan says), the
        divergence verdict before the weights change, then the optimizer step."""
        scaler, optimizer, p = self.parts.scaler, self.parts.optimizer, self.parts.plan
        for group in optimizer.param_groups:
            group["lr"] = p.lr_at(self.step)
        scaler.unscale_(optimizer)  # a no-op unless fp16
        norm = grad_norm(self.ddp.module, p.clip)
        # fp16 overflows are GradScaler's to skip; the norm is all-reduced (the same on
        # every rank), so every rank stops at the same step
        stop = divergence(self.step + 1, self.d.rank, _host(), loss=loss,
                          grad_norm=None if self.cfg.amp == "fp16" else norm, p=p,
                          amp=self.cfg.amp)
        if stop is not None:
            raise stop
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

    def log_metrics(self, loss: float) -> dict[str, Any]:
        """A log step's extra fields: the loss averaged over ranks, eval, samples/s."""
        rate = self.meter.interval_rate(self.global_samples)
        glob = _mean_across_ranks(loss, self.d.device)
        with phase("eval"):
            self.ev_loss, self.ev_acc = evaluate(self.ddp.module, self.parts.split.eval,
                                                 self.d, self.cfg)
        self.last_loss = glob
        return {"is_log_step": True, "global_loss": glob, "eval_loss": self.ev_loss,
                "eval_accuracy": self.ev_acc, "samples_per_s": rate}

    def preempt_point(self) -> None:
        """A step boundary: when any rank was signalled (all ranks agree, one all-reduce
        about every 0.5 s), make sure this step's checkpoint is on disk and stop
        (``Preempted``)."""
        if self.stops is None or self.step >= self.parts.total_steps:
            return
        signum = self.stops.poll(self.step)
        if not signum:
            return
        if not due(self.cfg, self.step, self.parts.total_steps):  # not written this step
            self.save_checkpoint()
        raise Preempted(signum, self.step, self.parts.total_steps,
                        str(checkpoint_path(self.cfg, self.step)))

    def checkpoint(self) -> None:
        if due(self.cfg, self.step, self.parts.total_steps):
            self.save_checkpoint()

    def save_checkpoint(self) -> None:
        spe = self.parts.steps_per_epoch
        with phase("checkpoint"):  # rank 0 writes while the others wait: its own allowance
            save(self.cfg, self.d, self.step, self.ddp.module, self.parts.optimizer,
                 self.parts.scaler,
                 sampler={"epoch": self.step // spe, "offset": self.step % spe,
                          "steps_per_epoch": spe, "seed": self.cfg.seed})

    def summary(self, resumed_from: int | None, notes: Sequence[str]) -> Summary:
        if math.isnan(self.ev_loss):
            with phase("eval"):
                self.ev_loss, self.ev_acc = evaluate(self.ddp.module, self.parts.split.eval,
                                                     self.d, self.cfg)
        stop = divergence(self.step, self.d.rank, _host(), loss=self.ev_loss, grad_norm=None,
                          p=self.parts.plan, amp=self.cfg.amp)
        if stop is not None:  # the eval loss: a diverged run never reports success
            raise stop
        m, timed = self.meter, self.meter.timed_steps
        mean_step = m.mean(m.timed_wall)
        params = count_parameters(self.parts.model)
        cfg = self.cfg
        flops = flops_per_step(cfg.model, params, width=cfg.width, depth=cfg.depth,
                               batch_size=cfg.batch_size, grad_accum=cfg.grad_accum)
        name = device_name(self.d.device)
        use = utilisation(flops, mean_step, device=self.d.device, device_name=name,
                          precision=precision_label(cfg.amp), tf32=cfg.tf32)
        return Summary(
            steps=self.step, final_loss=self.last_loss, eval_loss=self.ev_loss,
            eval_accuracy=self.ev_acc,
            samples_per_s=self.global_samples / mean_step if timed else float("nan"),
            bytes_per_step=self.plan.bytes_per_step, bytes_note=self.plan.note,
            step_time_s=mean_step, compute_s=m.mean(m.sum_compute),
            comm_wait_s=m.mean(m.sum_comm),
            comm_share=m.sum_comm / m.timed_wall if m.timed_wall else float("nan"),
            parameters=params, world_size=self.d.world_size,
            resumed_from=resumed_from, config=self.cfg.to_dict(), backend=self.d.backend,
            device=self.d.device, notes=tuple(notes), optimizer=self.parts.plan.to_dict(),
            precision=precision_label(self.cfg.amp), flops_per_step=flops,
            precision_note=precision_note(self.cfg.amp, self.d.device, flops,
                                          m.mean(m.sum_compute)),
            device_name=name, tf32=cfg.tf32 if self.d.device.startswith("cuda") else None,
            utilisation=use.to_dict(),
        )


def device_name(device: str) -> str:
    """The CUDA device's name ("NVIDIA H100 80GB HBM3"), or "cpu"."""
    if device.startswith("cuda"):
        return str(torch.cuda.get_device_name(torch.device(device)))
    return "cpu"


def grad_norm(model: torch.nn.Module, clip: float) -> float:
    """The total gradient norm, clipping to ``clip`` first where it is set."""
    params = [q for q in model.parameters() if q.grad is not None]
    if clip:
        return float(torch.nn.utils.clip_grad_norm_(params, clip))
    grads = [q.grad for q in params if q.grad is not None]
    return float(torch.nn.utils.get_total_norm(grads)) if grads else 0.0


def _host() -> str:
    import socket

    return socket.gethostname()


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
