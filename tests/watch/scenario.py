"""A tiny DDP training script with one fault, for the watch's real-process tests:
``python scenario.py MODE`` where MODE is ok, stop, kill, skip, shape or sleepdata; rank
``FAULT_RANK`` (default 1) misbehaves at step ``FAULT_STEP`` (default 5)."""

from __future__ import annotations

import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import ddpnet


def main(mode: str) -> None:
    handle = ddpnet.init(watch_timeout=float(os.environ.get("WATCH_TIMEOUT", "4")))
    faulty = handle.rank == int(os.environ.get("FAULT_RANK", "1"))
    fault_step = int(os.environ.get("FAULT_STEP", "5"))
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(int(os.environ.get("STEPS", "40"))):
        fault = faulty and step == fault_step
        ddpnet.step(step)
        with ddpnet.phase("data"):
            x = torch.randn(8, 16)
            if fault and mode == "sleepdata":
                time.sleep(600)
        with ddpnet.phase("forward"):
            loss = model(x).sum()
        with ddpnet.phase("backward"):
            loss.backward()
        with ddpnet.phase("step"):
            opt.step()
            opt.zero_grad()
        if fault and mode in ("stop", "kill"):
            os.kill(os.getpid(), signal.SIGSTOP if mode == "stop" else signal.SIGKILL)
        if not (fault and mode == "skip"):
            dist.all_reduce(torch.ones(7 if fault and mode == "shape" else 1))
        time.sleep(0.02)
    print("finished", flush=True)
    ddpnet.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
