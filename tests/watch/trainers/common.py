"""What every trainer script here shares: seeded data and model, the fault a rank injects at
a step (from the framework's own callback or loop), and the lines the lab test reads.

Environment: ``STEPS`` (30), ``STEP_S`` (seconds slept a step, 0), ``FAULT`` (none, stop,
kill, cut, term), ``FAULT_RANK`` (1; -1: every rank), ``FAULT_STEP`` (10) and ``FAULT_AFTER_S`` (0): the fault comes
at the first step from FAULT_STEP on that is FAULT_AFTER_S after step 1 (every rank's watch has
connected by then), ``KILL_AFTER_S`` (0.5), ``CKPT_DIR`` (a checkpoint directory rank 0
writes to). ``cut`` only says so (``fault cut``): the lab test cuts the link. Lines: ``step N`` per optimizer step, ``fault MODE TIME PID`` when injected,
``validated N`` after each validation, ``saved PATH`` after rank 0's checkpoint, and at the
end ``loss REPR`` (the trained model's loss on a fixed set, repr: compared bit for bit),
``timing {"step_s": ...}`` (the median step from step 6 on) and ``done``.
"""

from __future__ import annotations

import itertools
import os
import signal
import socket
import sys
import time

import torch
from torch import nn
from torch.utils.data import TensorDataset

STEPS = int(os.environ.get("STEPS", "30"))
FAULT = os.environ.get("FAULT", "none")
FAULT_RANK = int(os.environ.get("FAULT_RANK", "1"))
FAULT_STEP = int(os.environ.get("FAULT_STEP", "10"))
FAULT_AFTER_S = float(os.environ.get("FAULT_AFTER_S", "0"))
STEP_S = float(os.environ.get("STEP_S", "0"))
_first: list[float] = []
_injected: list[str] = []
#: each step's end (monotonic), for the timing line
_ends: list[float] = []
BATCH = 8
LR = 0.05
VAL_EVERY = 10
SEED = 1234


def say(text: str) -> None:
    """One write a line: ranks sharing a pipe never split each other's lines."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def seed() -> None:
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)


def model() -> nn.Module:
    """The same initial weights on every rank and in every run."""
    torch.manual_seed(SEED)
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))


def dataset(world: int, steps: int = STEPS) -> TensorDataset:
    """Enough samples for ``steps`` steps of BATCH a rank (one epoch)."""
    gen = torch.Generator().manual_seed(SEED)
    x = torch.randn(BATCH * world * steps, 16, generator=gen)
    return TensorDataset(x, x.pow(2).sum(1, keepdim=True) / 16)


def validation_set() -> TensorDataset:
    gen = torch.Generator().manual_seed(SEED + 1)
    x = torch.randn(64, 16, generator=gen)
    return TensorDataset(x, x.pow(2).sum(1, keepdim=True) / 16)


def loss_fn(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(out, y)


def final(net: nn.Module) -> None:
    """The trained model's loss on the fixed validation set, exactly, and ``done``."""
    x, y = validation_set().tensors
    with torch.no_grad():
        loss = loss_fn(net(x), y)
    say(f"loss {float(loss)!r}")
    gaps = sorted(b - a for a, b in itertools.pairwise(_ends[5:]))
    if gaps:  # the median step from step 6 on (benchmarks/trainers_overhead.py)
        say(f"timing {{\"step_s\": {gaps[len(gaps) // 2]:.6f}, \"steps\": {len(_ends)}}}")
    say("done")


def on_step(step: int, rank: int) -> None:
    """After optimizer step ``step`` (from 1): the line, and this rank's fault if it is due."""
    if step == 1:  # whether the watch runs here, read without importing ddpnet
        session = sys.modules.get("ddpnet.watch.session")
        say(f"watched {bool(session is not None and session.active())} rank {rank} "
            f"host {socket.gethostname()}")
    say(f"step {step} rank {rank}")
    now = time.monotonic()
    _ends.append(now)
    if not _first:
        _first.append(now)
    time.sleep(STEP_S)
    if FAULT_RANK not in (rank, -1) or step < FAULT_STEP or now - _first[0] < FAULT_AFTER_S or \
            _injected:
        return
    _injected.append(FAULT)
    if FAULT == "stop":
        inject("stop")
        os.kill(os.getpid(), signal.SIGSTOP)
    elif FAULT == "kill":
        inject("kill")
        time.sleep(float(os.environ.get("KILL_AFTER_S", "0.5")))
        os.kill(os.getpid(), signal.SIGKILL)
    elif FAULT == "cut":
        inject("cut")
    elif FAULT == "term":  # as a scheduler's preemption: every rank (FAULT_RANK -1) at once
        inject("term")
        os.kill(os.getpid(), signal.SIGTERM)


def inject(mode: str) -> None:
    say(f"fault {mode} {time.time():.3f} {os.getpid()}")


#: what a test sets for a run; forwarded to workers a framework starts with an environment of
#: its own (Ray's, through the job's runtime_env)
KNOBS = ("STEPS", "STEP_S", "FAULT", "FAULT_RANK", "FAULT_STEP", "FAULT_AFTER_S",
         "KILL_AFTER_S", "CKPT_DIR", "DDPNET_WATCH", "DDPNET_WATCH_DIR", "OMP_NUM_THREADS")


def knobs() -> dict[str, str]:
    return {k: os.environ[k] for k in KNOBS if k in os.environ}


def world() -> int:
    return int(os.environ["WORLD_SIZE"])


def local_world() -> int:
    """Ranks on this node (torchrun's LOCAL_WORLD_SIZE): what Lightning calls devices."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def nodes() -> int:
    return world() // local_world()


def ckpt_dir() -> str:
    return os.environ.get("CKPT_DIR") or os.path.join(os.getcwd(), "ckpt")
