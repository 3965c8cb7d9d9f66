"""Issue 19 on a real GPU: what CPU tests cannot show. Skipped with one line where torch
sees no CUDA device (CI, CPU machines); run on a GPU node with
``pytest -q -p no:cacheprovider tests/gpu``. Not yet run on a GPU."""

from __future__ import annotations

import json
import math
import os
from typing import Any

import pytest

from tests.conftest import RunCli
from tests.train.helpers import train_cli


def _gpus() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


pytestmark = pytest.mark.skipif(_gpus() == 0, reason="no CUDA GPU visible: GPU suite skipped")

#: the issue's transformer (it diverged to NaN at SGD lr 0.05 on an H100)
ISSUE_MODEL = ("--model", "transformer", "--width", "512", "--depth", "4", "--batch-size",
               "256", "--samples", "65536", "--eval-samples", "2048", "--device", "cuda")


def _train(*args: str) -> dict[str, Any]:
    proc = train_cli(*args, "--json", timeout=600)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


@pytest.mark.parametrize("amp", ["off", "bf16", "fp16"])
def test_the_issues_transformer_trains_with_its_defaults(amp: str) -> None:
    got = _train(*ISSUE_MODEL, "--max-steps", "200", "--log-every", "50", "--amp", amp)
    assert got["optimizer"]["optimizer"] == "adamw"
    assert math.isfinite(got["final_loss"]) and math.isfinite(got["eval_loss"])
    assert got["eval_loss"] < math.log(10)  # below chance: the loss fell
    assert got["precision"] == ("fp32" if amp == "off" else amp)
    assert got["samples_per_s"] > 0
    if amp != "off":  # ~155 GFLOP per step: the note says why bf16/fp16 gain little
        assert got["precision_note"] and "GFLOP per step" in got["precision_note"]


def test_the_old_default_diverges_and_says_so() -> None:
    proc = train_cli(*ISSUE_MODEL, "--max-steps", "200", "--optimizer", "sgd", "--lr", "0.05",
                     "--json", timeout=600)
    if proc.returncode == 0:
        pytest.skip("SGD at lr 0.05 did not diverge on this GPU in 200 steps")
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["error"]["id"] == "training-diverged"


@pytest.mark.skipif(_gpus() > 1, reason="needs a machine with exactly one GPU")
def test_two_local_ranks_on_one_gpu_are_named(run_cli: RunCli) -> None:
    proc = run_cli("check", "--local", "2", "--backend", "nccl", "--json", timeout=300)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert json.loads(proc.stdout)["root_cause"]["id"] == "ranks-share-gpu"


def test_nccl_debug_lines_stay_off_the_json(run_cli: RunCli) -> None:
    env = {"NCCL_DEBUG": "INFO", **{k: v for k, v in os.environ.items()
                                    if k == "CUDA_VISIBLE_DEVICES"}}
    proc = run_cli("bench", "--backend", "nccl", "-b", "1M", "-e", "4M", "--iters", "3",
                   "--warmup", "1", "--baseline", "none", "--json", env=env, timeout=300)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert json.loads(proc.stdout)["backend"] == "nccl"  # the whole of stdout
    assert "NCCL INFO" in proc.stderr


def test_the_gpu_defaults_report_mfu_tf32_and_fused_kernels() -> None:
    """Issue 30: at its GPU defaults the transformer is matmul-bound (the sizes, TF32 and the
    fused optimizer are stated) and the summary carries MFU beside samples/s."""
    got = _train("--model", "transformer", "--device", "cuda", "--max-steps", "30",
                 "--log-every", "30", "--amp", "bf16")
    assert got["config"]["sized_by"] == "cuda defaults" and got["config"]["width"] == 2048
    assert got["tf32"] is True and got["precision_note"] is None  # ~10 TFLOP per step
    assert any("fused optimizer kernels" in n for n in got["notes"]), got["notes"]
    assert got["model_tflops"] > 0 and got["device_name"].startswith("NVIDIA")
    if got["utilisation"]["gpu"] is not None:  # a GPU in the peak table
        assert 0 < got["mfu"] < 1
