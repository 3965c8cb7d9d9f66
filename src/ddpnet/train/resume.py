"""A run's checkpoints across ranks: rank 0 alone reads and writes the files
(:mod:`ddpnet.train.checkpoint`), broadcasting what it read and gathering every rank's RNG
state to write, so no shared disk is needed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ddpnet.train import checkpoint as ckpt
from ddpnet.train.config import TrainConfig
from ddpnet.train.dist import Dist
from ddpnet.train.preempt import restart_count


def restore(cfg: TrainConfig, d: Dist, model: torch.nn.Module,
            optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
            notes: list[str]) -> int | None:
    """Load the newest complete checkpoint of ``cfg.checkpoint_dir`` into the bare model,
    the optimizer and the scaler (before DDP wraps the model: DDP broadcasts rank 0's
    parameters at construction); the step it was taken at, or None (a fresh run)."""
    if not cfg.checkpoint_dir:
        return None
    step, state = _newest(Path(cfg.checkpoint_dir), d, notes)
    if state is None:
        if restart_count(os.environ):  # a requeued job that finds nothing: say so
            notes.append(f"restart {restart_count(os.environ)} found no checkpoint in "
                         f"{cfg.checkpoint_dir}: training starts at step 0")
        return None
    if d.rank == 0:  # a job that recovers by itself keeps a record: where it resumed
        from ddpnet.launch.recover import note_resumed

        note_resumed(os.environ, step)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scaler.load_state_dict(state["scaler"])
    rngs = state["rng"]
    if len(rngs) == d.world_size:
        ckpt.set_rng_state(rngs[d.rank])
    else:
        notes.append(f"world size changed {len(rngs)} -> {d.world_size}: "
                     "RNG states reseeded, data order continues by epoch")
    if state["config"]["batch_size"] != cfg.batch_size or state["world_size"] != d.world_size:
        notes.append("global batch differs from the checkpoint's: the step count "
                     "continues, the samples seen per step change")
    return step


def _newest(directory: Path, d: Dist, notes: list[str]) -> tuple[int, dict[str, Any] | None]:
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
    notes.append(f"resumed from step {step} (restart {restart_count(os.environ)}): {path}")
    return int(step), state


def due(cfg: TrainConfig, step: int, total_steps: int) -> bool:
    """A checkpoint is written at the end and every ``--checkpoint-every`` steps."""
    return bool(cfg.checkpoint_dir) and (step == total_steps or (
        cfg.checkpoint_every > 0 and step % cfg.checkpoint_every == 0))


def checkpoint_path(cfg: TrainConfig, step: int) -> Path:
    """Where rank 0 writes the checkpoint of ``step``."""
    assert cfg.checkpoint_dir is not None
    return Path(cfg.checkpoint_dir) / ckpt.checkpoint_name(step)


def save(cfg: TrainConfig, d: Dist, step: int, model: torch.nn.Module,
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
