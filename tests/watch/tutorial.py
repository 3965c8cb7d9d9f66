"""A DDP script shaped like PyTorch's tutorial, with NO ddpnet import: its own
``init_process_group``, a DataLoader over a DistributedSampler (num_workers=0), DDP, SGD, and
one metric ``all_reduce`` per step (the loss average). The watch can only reach it by
attaching (``ddpnet.watch.attach``).

Environment: ``BACKEND`` (gloo), ``INIT_METHOD`` (unset: env://; ``tcp://H:P`` passes
RANK/WORLD_SIZE as arguments), ``STEPS`` (20), ``STEP_S`` (seconds of work per step, 0.02),
``FAULT`` (none, stop, kill, sleepdata, skipmetric, checkpoint, eval; several comma-separated),
``FAULT_RANK`` (1; checkpoint and eval are rank 0's), ``FAULT_HOST`` (when set, the rank on
that host is the faulty one, whatever its rank: c10d numbers nodes as they come), ``FAULT_STEP`` (5), ``EVAL_STEP`` (eval's
step, default FAULT_STEP), ``SLEEP_S`` (sleepdata, 3600), ``KILL_AFTER_S`` (kill, 0),
``CHECKPOINT_S`` (25), ``CKPT_PAUSE_S`` (0.05), ``EVAL_S`` (20). The dataset holds at most 200 steps' batches (a long
run goes round its epochs).

It prints ``watched True|False`` (whether the watch runs in this process, read without
importing ddpnet), ``step N`` per step, ``fault MODE TIME PID`` when it injects one, and
``done`` at the end, then ``timing {"step_s": ...}`` (the median wall seconds a step from
step 10 on: benchmarks/watch_overhead.py's attached figure).
"""

from __future__ import annotations

import itertools
import os
import signal
import socket
import sys
import tempfile
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

FAULTS = frozenset(os.environ.get("FAULT", "none").split(","))
FAULT_RANK = int(os.environ.get("FAULT_RANK",
                                "0" if {"checkpoint", "eval"} >= FAULTS else "1"))
FAULT_HOST = os.environ.get("FAULT_HOST", "")
FAULT_STEP = int(os.environ.get("FAULT_STEP", "5"))
EVAL_STEP = int(os.environ.get("EVAL_STEP", str(FAULT_STEP)))
STEPS = int(os.environ.get("STEPS", "20"))
STEP_S = float(os.environ.get("STEP_S", "0.02"))
BATCH = 8


def say(text: str) -> None:
    """One write a line: ranks sharing a pipe (plain torchrun) never split each other's."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def inject(mode: str) -> None:
    say(f"fault {mode} {time.time():.3f} {os.getpid()}")


class Squares(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Random inputs and a target; item ``stall_at`` sleeps on the faulty rank (a stalled
    data loader)."""

    def __init__(self, size: int, stall_at: int | None) -> None:
        gen = torch.Generator().manual_seed(0)
        self.x = torch.randn(size, 16, generator=gen)
        self.y = self.x.pow(2).sum(1, keepdim=True)
        self.stall_at = stall_at
        self.served = 0

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.served += 1
        if self.stall_at is not None and self.served == self.stall_at:
            inject("sleepdata")
            time.sleep(float(os.environ.get("SLEEP_S", "3600")))
        return self.x[i], self.y[i]


def checkpoint(model: nn.Module) -> None:
    """Rank 0 writes checkpoints for CHECKPOINT_S seconds (a long, working save) to slow
    storage: each 1 MiB ``torch.save`` is fsynced, then the storage takes CKPT_PAUSE_S
    (0.05) before the next: ~20 MiB/s at ~5% of a core. A save is I/O-bound: its CPU would
    be no evidence (evaluate() is the CPU-bound one), the bytes are."""
    inject("checkpoint")
    end = time.monotonic() + float(os.environ.get("CHECKPOINT_S", "25"))
    pause = float(os.environ.get("CKPT_PAUSE_S", "0.05"))
    with tempfile.TemporaryDirectory() as tmp:
        while time.monotonic() < end:
            with open(os.path.join(tmp, "ckpt.pt"), "wb") as out:
                torch.save({"model": model.state_dict(), "pad": torch.randn(1 << 18)}, out)
                out.flush()
                os.fsync(out.fileno())
            time.sleep(pause)


def evaluate(model: nn.Module) -> float:
    """Rank 0 evaluates for EVAL_S seconds on the CPU (a long, working evaluation)."""
    inject("eval")
    end = time.monotonic() + float(os.environ.get("EVAL_S", "20"))
    total = 0.0
    with torch.no_grad():
        while time.monotonic() < end:
            total += float(model(torch.randn(256, 16)).sum())
    return total


def fault_at(step: int, rank: int, model: nn.Module) -> bool:
    """Inject this step's fault; True when the step's metric all_reduce is to be skipped."""
    faulty = socket.gethostname() == FAULT_HOST if FAULT_HOST else rank == FAULT_RANK
    if not faulty:
        return False
    if step == EVAL_STEP and "eval" in FAULTS:
        evaluate(model)
    if step != FAULT_STEP:
        return False
    if "stop" in FAULTS:
        inject("stop")
        os.kill(os.getpid(), signal.SIGSTOP)
    elif "kill" in FAULTS:
        inject("kill")
        # KILL_AFTER_S: the others are then surely inside the step's first collective
        time.sleep(float(os.environ.get("KILL_AFTER_S", "0")))
        os.kill(os.getpid(), signal.SIGKILL)
    elif "checkpoint" in FAULTS:
        checkpoint(model)
    elif "skipmetric" in FAULTS:
        inject("skipmetric")
        return True
    return False


def main() -> int:
    backend = os.environ.get("BACKEND", "gloo")
    method = os.environ.get("INIT_METHOD")
    if method:
        dist.init_process_group(backend, init_method=method, rank=int(os.environ["RANK"]),
                                world_size=int(os.environ["WORLD_SIZE"]))
    else:
        dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    session = sys.modules.get("ddpnet.watch.session")  # read, never imported here
    say(f"watched {bool(session is not None and session.active())} rank {rank} of {world}")
    device = torch.device(f"cuda:{os.environ.get('LOCAL_RANK', '0')}") \
        if backend == "nccl" else torch.device("cpu")
    stall = FAULT_STEP * BATCH + 1 if "sleepdata" in FAULTS and rank == FAULT_RANK else None
    data = Squares(BATCH * world * min(STEPS + 1, 200), stall)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True)
    loader = DataLoader(data, batch_size=BATCH, sampler=sampler, num_workers=0)
    model = DistributedDataParallel(
        nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).to(device),
        device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    step, ends = 0, []
    for epoch in range(1 << 20):
        sampler.set_epoch(epoch)
        for x, y in loader:
            if step >= STEPS:
                break
            say(f"step {step}")
            skip = fault_at(step, rank, model.module)
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
            if not skip:
                metric = loss.detach().clone()
                dist.all_reduce(metric)
            time.sleep(STEP_S)
            ends.append(time.perf_counter())
            step += 1
        if step >= STEPS:
            break
    dist.destroy_process_group()
    say("done")
    walls = sorted(b - a for a, b in itertools.pairwise(ends[10:]))
    if walls:
        say(f'timing {{"step_s": {walls[len(walls) // 2]:.6f}}}')
    return 0


if __name__ == "__main__":
    sys.exit(main())
