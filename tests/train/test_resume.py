"""A run stopped after step k and resumed from its checkpoint equals an uninterrupted run:
model, optimizer momentum, sampler position (mid-epoch) and RNG states all come back."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.train.helpers import final_params, max_abs_diff, train_json

pytestmark = pytest.mark.slow

# 512 samples / (16 x 2 ranks) = 16 steps per epoch: step 10 is mid-epoch 0, 24 is in epoch 1
COMMON = ("--local", "2", "--model", "cnn", "--width", "4", "--samples", "512",
          "--batch-size", "16", "--lr", "0.05", "--log-every", "8", "--checkpoint-every", "5")


def test_interrupted_and_resumed_equals_uninterrupted(tmp_path: Path) -> None:
    straight = train_json(*COMMON, "--max-steps", "24", "--checkpoint-dir",
                          str(tmp_path / "straight"))
    first = train_json(*COMMON, "--max-steps", "10", "--checkpoint-dir", str(tmp_path / "cut"))
    assert first["steps"] == 10 and first["resumed_from"] is None
    second = train_json(*COMMON, "--max-steps", "24", "--checkpoint-dir", str(tmp_path / "cut"))
    assert second["resumed_from"] == 10
    assert second["steps"] == straight["steps"] == 24
    assert max_abs_diff(final_params(tmp_path / "straight"), final_params(tmp_path / "cut")) \
        < 1e-6
    assert abs(second["eval_loss"] - straight["eval_loss"]) < 1e-5


def test_resuming_a_finished_run_trains_nothing_more(tmp_path: Path) -> None:
    args = (*COMMON, "--max-steps", "5", "--checkpoint-dir", str(tmp_path / "c"))
    train_json(*args)
    again = train_json(*args)
    assert again["resumed_from"] == 5 and again["steps"] == 5
