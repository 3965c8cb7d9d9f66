"""Bad flag combinations exit 2 with one line and a hint, before any process group exists;
each comm hook, AMP and static graph run end to end on two ranks."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import RunCli, assert_user_error
from tests.train.helpers import train_json


@pytest.mark.parametrize(("args", "needles"), [
    (("--amp", "fp16", "--device", "cpu"), ("fp16", "--amp bf16")),
    (("--comm-hook", "powersgd", "--powersgd-rank", "0"), ("--powersgd-rank",)),
    (("--comm-hook", "powersgd", "--powersgd-rank", "-3"), ("--powersgd-rank",)),
    (("--powersgd-rank", "2"), ("only applies",)),
    (("--checkpoint-every", "5"), ("--checkpoint-dir",)),
    # before training, not after it (it trained to the end, then a 47-line traceback)
    (("--checkpoint-dir", "/proc/x"), ("--checkpoint-dir /proc/x", "cannot create")),
    (("--checkpoint-dir", "/proc/x", "--local", "2"), ("--checkpoint-dir /proc/x",)),
    (("--local", "0"), ("--local",)),
    (("--batch-size", "0"), ("--batch-size",)),
    (("--model", "resnet"), ("resnet",)),
])
def test_bad_flags_exit_2_with_a_hint(run_cli: RunCli, args: tuple[str, ...],
                                      needles: tuple[str, ...]) -> None:
    assert_user_error(run_cli("train", *args), 2, *needles)


def test_fp16_without_cuda_under_auto_device(run_cli: RunCli) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: fp16 is valid here")
    assert_user_error(run_cli("train", "--amp", "fp16"), 2, "CUDA")


def test_too_small_a_dataset_is_a_usage_error(run_cli: RunCli) -> None:
    proc = run_cli("train", "--samples", "16", "--batch-size", "32", timeout=120)
    assert_user_error(proc, 2, "fewer than one global step")


COMMON = ("--local", "2", "--model", "mlp", "--width", "128", "--samples", "1024",
          "--batch-size", "32", "--max-steps", "16", "--log-every", "8", "--lr", "0.05")


@pytest.fixture(scope="module")
def base() -> dict[str, Any]:
    return train_json(*COMMON)


@pytest.mark.slow
@pytest.mark.parametrize(("hook", "extra", "ratio"), [
    ("bf16", ("--amp", "bf16", "--static-graph"), 0.5),
    ("fp16", ("--bucket-cap-mb", "1"), 0.5),
    ("powersgd", ("--powersgd-rank", "2", "--grad-accum", "2"), None),
])
def test_comm_hooks_train_and_cut_bytes(base: dict[str, Any], hook: str,
                                        extra: tuple[str, ...], ratio: float | None) -> None:
    got = train_json(*COMMON, "--comm-hook", hook, *extra)
    assert got["steps"] == 16 and got["config"]["comm_hook"] == hook
    if ratio is not None:
        assert got["bytes_per_step"] == int(base["bytes_per_step"] * ratio)
    else:
        assert got["bytes_per_step"] < base["bytes_per_step"] / 4
    # the hook is really in the path: the trajectory changes, only a little
    assert got["eval_loss"] != base["eval_loss"]
    assert abs(got["eval_loss"] - base["eval_loss"]) < 0.1 * base["eval_loss"]
    assert got["eval_loss"] < 2.3  # below chance-level cross-entropy ln(10): it learned


def test_cpu_ranks_run_with_huge_pages_on(base: dict[str, Any]) -> None:
    # set by the CLI before torch is imported, inherited by the --local ranks
    assert any(n.startswith("THP_MEM_ALLOC_ENABLE=1") for n in base["notes"]), base["notes"]


@pytest.mark.slow
def test_compile_trains_as_the_eager_model_does(base: dict[str, Any]) -> None:
    """``--compile`` (torch.compile in place, before DDP wraps the model) runs on a CPU too:
    the same steps, the same bytes, and a loss within float tolerance of the eager run."""
    got = train_json(*COMMON, "--compile", timeout=300)
    assert got["config"]["compile"] is True and got["steps"] == base["steps"]
    assert got["bytes_per_step"] == base["bytes_per_step"]
    assert got["eval_loss"] == pytest.approx(base["eval_loss"], rel=1e-3)
