"""DDP on 2 and 4 local ranks ends with the parameters one process reaches on the same global
batch: the DistributedSampler hands rank r the indices perm[r::N], so the union of the ranks'
batches is exactly one process's batch of N times the size, and DDP averages the gradients."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.train.helpers import final_params, max_abs_diff, train_json

pytestmark = pytest.mark.slow

COMMON = ("--model", "mlp", "--width", "32", "--samples", "1024", "--max-steps", "12",
          "--lr", "0.1", "--log-every", "6", "--checkpoint-every", "6")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One process at batch 32; 2 ranks x 16; 4 ranks x 8; 2 ranks x 8 x 2 accumulated."""
    tmp = tmp_path_factory.mktemp("equiv")
    shapes = {
        "one": ("--local", "1", "--batch-size", "32"),
        "two": ("--local", "2", "--batch-size", "16"),
        "four": ("--local", "4", "--batch-size", "8"),
        "accum": ("--local", "2", "--batch-size", "8", "--grad-accum", "2"),
    }
    for name, args in shapes.items():
        summary = train_json(*COMMON, "--checkpoint-dir", str(tmp / name), *args)
        assert summary["steps"] == 12
        assert summary["world_size"] == int(args[1])
    return {name: tmp / name for name in shapes}


def test_two_and_four_ranks_equal_one_process(runs: dict[str, Path]) -> None:
    ref = final_params(runs["one"])
    # the only difference is the summation order inside all-reduce (float rounding)
    assert max_abs_diff(ref, final_params(runs["two"])) < 1e-5
    assert max_abs_diff(ref, final_params(runs["four"])) < 1e-5


def test_grad_accum_with_no_sync_equals_one_big_batch(runs: dict[str, Path]) -> None:
    assert max_abs_diff(final_params(runs["one"]), final_params(runs["accum"])) < 1e-5


def test_the_tolerance_is_meaningful(runs: dict[str, Path]) -> None:
    """Six steps earlier the same run is far away: the equality above is not vacuous."""
    state = torch.load(runs["one"] / "ckpt-00000006.pt", map_location="cpu",
                       weights_only=False)
    assert max_abs_diff(state["model"], final_params(runs["two"])) > 1e-3
