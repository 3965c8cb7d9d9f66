"""Atomic rank-0 checkpoints: complete or absent, newest complete one wins, pruned to K."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

from ddpnet.train import checkpoint as ckpt


def _state(step: int) -> dict[str, Any]:
    return {"step": step, "model": {"w": torch.full((3,), float(step))}}


def test_save_is_atomic_and_pruned(tmp_path: Path) -> None:
    for step in (5, 10, 15, 20):
        ckpt.save_atomic(_state(step), tmp_path, step, keep=2)
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path)] == [20, 15]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    loaded = ckpt.load_newest(tmp_path)
    assert loaded is not None and loaded.step == 20
    assert torch.equal(loaded.state["model"]["w"], torch.full((3,), 20.0))


def test_a_temp_file_and_a_damaged_newest_are_skipped(tmp_path: Path) -> None:
    ckpt.save_atomic(_state(5), tmp_path, 5, keep=3)
    (tmp_path / ".ckpt-abc.tmp").write_bytes(b"half a checkpoint")  # a writer died mid-way
    (tmp_path / ckpt.checkpoint_name(10)).write_bytes(b"truncated")  # damaged by hand
    loaded = ckpt.load_newest(tmp_path)
    assert loaded is not None and loaded.step == 5
    assert len(loaded.skipped) == 1 and "ckpt-00000010.pt" in loaded.skipped[0]


def test_a_failed_write_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_a: Any, **_k: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(ckpt.torch, "save", boom)
    with pytest.raises(OSError):
        ckpt.save_atomic(_state(5), tmp_path, 5, keep=3)
    assert os.listdir(tmp_path) == []
    assert ckpt.load_newest(tmp_path) is None


def test_missing_directory_means_fresh_start(tmp_path: Path) -> None:
    assert ckpt.load_newest(tmp_path / "nope") is None


def test_rng_state_round_trips() -> None:
    state = ckpt.rng_state()
    a = torch.rand(3)
    ckpt.set_rng_state(state)
    assert torch.equal(a, torch.rand(3))
