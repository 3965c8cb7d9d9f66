"""Unmarked DDP loops on ``ddpnet.init()`` (no ``ddpnet.step``/``ddpnet.phase`` calls), run
by :func:`tests.watch.scenario.run_job` (``script=``) as ``python unmarked.py MODE``.

The DataLoader loop (test_infer: steps inferred from torch's hooks): a DataLoader with a
DistributedSampler, DDP, SGD, one metric ``all_reduce`` a step. MODE ``ok``, or ``desync``:
rank ``FAULT_RANK`` (default 1) skips its metric all_reduce at step ``FAULT_STEP`` (default
10; the metric has the size of DDP's one gradient bucket, 68 floats, so nothing hangs or
aborts). ``STEPS`` (default 40) steps in epochs of ``EPOCH`` (default 100) steps.

The working loop (test_activity_live: a working rank is no hang), no watch_timeout: MODE
``work``: from step ``AT_STEP`` on, once the hub told it a learned threshold, rank 0
evaluates for ``EVAL_S`` seconds (CPU-bound Python), and ``AT_STEP`` steps later writes a
checkpoint for ``SAVE_S`` seconds (128 KiB and an fsync every 0.1 s: little CPU, bytes
moving), each while the others wait in the next all_reduce: healthy, no verdict. ``sleep``:
rank 1 sleeps 600 s in its data step (from ``AT_STEP`` on, once learned: it does not work,
it is named)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import ddpnet
from ddpnet.watch.session import recorder
from ddpnet.watch.session import threshold as watch_threshold

BATCH = 8


def main(mode: str) -> None:
    if mode in ("ok", "desync"):
        loader_loop(mode)
    else:
        working_loop(mode)

def loader_loop(mode: str) -> None:
    timeout = os.environ.get("WATCH_TIMEOUT", "4")  # "": the default settings
    handle = ddpnet.init("gloo", watch_timeout=float(timeout) if timeout else None)
    faulty = handle.rank == int(os.environ.get("FAULT_RANK", "1"))
    fault_step = int(os.environ.get("FAULT_STEP", "10"))
    steps, epoch = int(os.environ.get("STEPS", "40")), int(os.environ.get("EPOCH", "100"))
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(epoch * BATCH * handle.world_size, 16),
                         torch.randn(epoch * BATCH * handle.world_size, 4))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=BATCH, sampler=sampler)
    model = DDP(torch.nn.Linear(16, 4))  # 68 parameters: one bucket
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    done = 0
    while done < steps:
        sampler.set_epoch(done // epoch)
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if faulty and done == fault_step and mode == "desync":
                print(f"fault {mode} {time.time()} {os.getpid()}", flush=True)
            else:
                dist.all_reduce(torch.ones(68))
            time.sleep(0.02)
            done += 1
            if done == steps:
                break
    print(f"inferred step {recorder().step} marked {recorder().marked_steps}", flush=True)
    ddpnet.shutdown()


def working_loop(mode: str) -> None:
    handle = ddpnet.init()
    print(f"pid {os.getpid()} watching {handle.watching}", flush=True)
    at = int(os.environ.get("AT_STEP", "100"))
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    done: list[int] = []  # rank 0's steps that evaluated, then saved
    for step in range(int(os.environ.get("STEPS", "400"))):
        x = batch(mode, handle.rank, step, at)
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
        if handle.rank == 0 and mode == "work" and len(done) < 2 and \
                step >= (done[-1] if done else 0) + at and learned():
            print(f"threshold {json.dumps(watch_threshold())}", flush=True)
            if not done:
                evaluate()
            else:
                save(Path(os.environ["DDPNET_WATCH_DIR"]))
            done.append(step)
            print(f"done {step} {time.time()}", flush=True)
        dist.all_reduce(torch.ones(1))
        time.sleep(0.02)
    print("finished", flush=True)
    ddpnet.shutdown()


def learned() -> bool:
    """Whether the hub told this rank a learned threshold (the job's own, ~5 s: the work
    below is longer; on a loaded machine learning takes more than 100 steps)."""
    return (watch_threshold() or {}).get("source") == "learned"


def batch(mode: str, rank: int, step: int, at: int) -> torch.Tensor:
    if mode == "sleep" and rank == 1 and step >= at and learned():
        print(f"fault sleep {time.time()}", flush=True)
        time.sleep(600)
    return torch.randn(8, 16)


def evaluate() -> float:
    """CPU-bound, no marks: the others wait in the next all_reduce."""
    end, total = time.monotonic() + float(os.environ.get("EVAL_S", "20")), 0.0
    while time.monotonic() < end:
        for i in range(10_000):
            total += i * i * 1e-12
    return total


def save(directory: Path) -> None:
    """A slow checkpoint write, no marks: little CPU, bytes moving to storage."""
    end = time.monotonic() + float(os.environ.get("SAVE_S", "25"))
    chunk = os.urandom(128 * 1024)
    with open(directory / "ckpt.bin", "wb") as f:
        while time.monotonic() < end:
            f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
            time.sleep(0.1)
    (directory / "ckpt.bin").unlink()


if __name__ == "__main__":
    main(sys.argv[1])
