"""Checkpoints written by rank 0 only, atomically, and found again after a crash.

A checkpoint is ``ckpt-<step>.pt`` in the checkpoint directory. It is written to a hidden temp
file in the same directory, flushed and fsynced, then renamed over its final name: a reader
sees either nothing or a complete file, never a half-written one, even if the node dies in the
middle. Resume picks the newest file that loads; a damaged one is skipped with a note.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

_NAME = re.compile(r"^ckpt-(\d{8})\.pt$")


def checkpoint_name(step: int) -> str:
    return f"ckpt-{step:08d}.pt"


def list_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    """Complete checkpoint files (by name), newest first; temp files are never listed."""
    if not directory.is_dir():
        return []
    found = []
    for entry in directory.iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry))
    return sorted(found, reverse=True)


def save_atomic(state: dict[str, Any], directory: Path, step: int, *, keep: int) -> Path:
    """Write ``state`` as the checkpoint for ``step`` (temp file + fsync + rename), then prune
    to the newest ``keep``. Call on rank 0 only."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / checkpoint_name(step)
    fd, tmp = tempfile.mkstemp(prefix=".ckpt-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(state, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)
    for _, old in list_checkpoints(directory)[keep:]:
        with contextlib.suppress(FileNotFoundError):
            old.unlink()
    return final


@dataclass(frozen=True)
class Loaded:
    step: int
    path: Path
    state: dict[str, Any]
    skipped: tuple[str, ...]


def load_newest(directory: Path,
                loader: Callable[[Path], dict[str, Any]] | None = None) -> Loaded | None:
    """The newest checkpoint that loads, or ``None``; unreadable ones are reported in
    ``skipped`` (a disk that filled up, a file copied in by hand)."""
    load = loader or _torch_load
    skipped = []
    for step, path in list_checkpoints(directory):
        try:
            state = load(path)
        except Exception as exc:  # a damaged file: fall back to the previous one
            skipped.append(f"{path.name}: {type(exc).__name__}: {exc}")
            continue
        if not isinstance(state, dict) or state.get("step") != step:
            skipped.append(f"{path.name}: not a ddpnet checkpoint for step {step}")
            continue
        return Loaded(step, path, state, tuple(skipped))
    return None


def _torch_load(path: Path) -> dict[str, Any]:
    state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=False)
    return state


def _fsync_dir(directory: Path) -> None:
    """Make the rename itself durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def rng_state() -> dict[str, Any]:
    """This process's RNG states (python, numpy, torch CPU and CUDA)."""
    import random

    import numpy as np

    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import random

    import numpy as np

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
