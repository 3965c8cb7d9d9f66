"""A healthy DDP job for the watch's soak (``benchmarks/watch_soak.py``), with NO ddpnet
import (the watch attaches: ``ddpnet exec``): its own ``init_process_group("gloo")``, DDP, SGD
and one metric ``all_reduce`` a step, for ``SOAK_S`` seconds; then rank ``FREEZE_RANK`` stops
itself (SIGSTOP; ``FREEZE=sleep``: it sleeps in its step instead, alive and stuck), the fault
the watch must still name after the soak.

Rank 0 pauses, unmarked, every ``PAUSE_EVERY_S`` seconds while the others wait in the next
all_reduce: a checkpoint (``CKPT_S`` s of fsynced 1 MiB ``torch.save`` writes, I/O-bound) and
an evaluation (``EVAL_S`` s of forward passes, CPU-bound), in turn; none starts within
``QUIET_END_S`` of the freeze, so that the time to name it is the watch's, not a pause's.

Environment: SOAK_S (60), STEP_S (0.02), PAUSE_EVERY_S (150), CKPT_S (25), EVAL_S (20),
QUIET_END_S (30), FREEZE_RANK (2), LOG_EVERY (500 steps). Prints ``step N`` every LOG_EVERY
steps, ``pause KIND START SECONDS`` after each pause, and ``fault FREEZE TIME PID step N``.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

SOAK_S = float(os.environ.get("SOAK_S", "60"))
STEP_S = float(os.environ.get("STEP_S", "0.02"))
PAUSE_EVERY_S = float(os.environ.get("PAUSE_EVERY_S", "150"))
QUIET_END_S = float(os.environ.get("QUIET_END_S", "30"))
FREEZE_RANK = int(os.environ.get("FREEZE_RANK", "2"))
LOG_EVERY = int(os.environ.get("LOG_EVERY", "500"))
FREEZE = os.environ.get("FREEZE", "stop")


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def checkpoint(model: nn.Module) -> None:
    """A long save to slow storage: little CPU, bytes moving (tests/watch/tutorial.py's)."""
    end = time.monotonic() + float(os.environ.get("CKPT_S", "25"))
    with tempfile.TemporaryDirectory() as tmp:
        while time.monotonic() < end:
            with open(os.path.join(tmp, "ckpt.pt"), "wb") as out:
                torch.save({"model": model.state_dict(), "pad": torch.randn(1 << 18)}, out)
                out.flush()
                os.fsync(out.fileno())
            time.sleep(0.05)


def evaluate(model: nn.Module) -> float:
    """A long evaluation on the CPU."""
    end, total = time.monotonic() + float(os.environ.get("EVAL_S", "20")), 0.0
    with torch.no_grad():
        while time.monotonic() < end:
            total += float(model(torch.randn(256, 16)).sum())
    return total


class Pauses:
    """Rank 0's unmarked pauses: every PAUSE_EVERY_S, a checkpoint then an evaluation in
    turn, none within QUIET_END_S of the freeze."""

    def __init__(self, start: float) -> None:
        self.start, self.last, self.done = start, start, 0

    def maybe(self, model: nn.Module) -> None:
        now = time.monotonic()
        if now - self.last < PAUSE_EVERY_S or now - self.start > SOAK_S - QUIET_END_S:
            return
        kind = "checkpoint" if self.done % 2 == 0 else "eval"
        began = time.time()
        if kind == "checkpoint":
            checkpoint(model)
        else:
            evaluate(model)
        say(f"pause {kind} {began:.3f} {time.time() - began:.1f}")
        self.done += 1
        self.last = time.monotonic()


def main() -> int:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(),
                                                  nn.Linear(32, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    start = time.monotonic()
    pauses = Pauses(start)
    step = 0
    while True:
        if rank == FREEZE_RANK and time.monotonic() - start >= SOAK_S:
            say(f"fault {FREEZE} {time.time():.3f} {os.getpid()} step {step}")
            if FREEZE == "sleep":
                time.sleep(3600)
            os.kill(os.getpid(), signal.SIGSTOP)
        x = torch.randn(8, 16)
        loss = nn.functional.mse_loss(model(x), x.pow(2).sum(1, keepdim=True))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == 0:
            pauses.maybe(model.module)
        dist.all_reduce(loss.detach().clone())
        time.sleep(STEP_S)
        step += 1
        if step % LOG_EVERY == 0:
            say(f"step {step}")


if __name__ == "__main__":
    sys.exit(main())
