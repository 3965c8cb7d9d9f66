"""Per-model optimiser defaults, warmup, and the divergence verdict (pure); on CPU a run
forced to diverge stops at its first non-finite step with one error line and exit 1, and the
transformer's defaults train with a finite, falling loss (issue 19)."""

from __future__ import annotations

import json
import math

import pytest

from ddpnet.train.optim import DEFAULTS, divergence, plan
from tests.train.helpers import train_cli, train_json


def test_mlp_and_cnn_keep_sgd_and_the_transformer_gets_adamw_warmup_and_clipping() -> None:
    for model in ("mlp", "cnn"):
        p = plan(model, 100)
        assert (p.optimizer, p.lr, p.warmup_steps, p.clip) == ("sgd", 0.05, 0, 0.0)
    t = plan("transformer", 400)
    assert (t.optimizer, t.lr, t.warmup_steps, t.clip) == ("adamw", 1e-3, 40, 1.0)
    assert plan("transformer", 10_000).warmup_steps == DEFAULTS["transformer"].warmup_cap


def test_flags_override_the_defaults() -> None:
    p = plan("transformer", 400, lr=3e-4, warmup_steps=0, clip=0.0)
    assert (p.lr, p.warmup_steps, p.clip) == (3e-4, 0, 0.0)
    sgd = plan("transformer", 400, optimizer="sgd")  # the other optimiser's plain settings
    assert (sgd.optimizer, sgd.lr, sgd.warmup_steps, sgd.clip) == ("sgd", 0.05, 0, 0.0)
    adamw = plan("mlp", 100, optimizer="adamw", clip=2.0)
    assert (adamw.optimizer, adamw.lr, adamw.clip) == ("adamw", 1e-3, 2.0)


def test_warmup_is_linear_and_a_function_of_the_step() -> None:
    p = plan("transformer", 400, warmup_steps=3)
    assert [p.lr_at(s) for s in range(5)] == pytest.approx(
        [0.25e-3, 0.5e-3, 0.75e-3, 1e-3, 1e-3])
    assert plan("mlp", 10).lr_at(0) == 0.05


def test_divergence_names_step_rank_and_what_to_try() -> None:
    p = plan("mlp", 10, lr=5.0)
    assert divergence(3, 1, "n1", loss=2.3, grad_norm=7.0, p=p, amp="off") is None
    err = divergence(3, 1, "n1", loss=float("nan"), grad_norm=1.0, p=p, amp="fp16")
    assert err is not None and err.error_id == "training-diverged" and err.exit_code == 1
    assert err.message == ("rank 1 (n1): training diverged at step 3: loss is nan "
                           "(sgd, lr 5, amp fp16)")
    assert "lower --lr (now 5" in err.hint and "--amp bf16 instead of fp16" in err.hint
    assert "--clip-grad" in err.hint and "\n" not in err.message
    by_norm = divergence(4, 0, "n0", loss=2.0, grad_norm=math.inf, p=plan("transformer", 100),
                         amp="bf16")
    assert by_norm is not None and "gradient norm is inf" in by_norm.message
    assert "--clip-grad" not in by_norm.hint and "fp16" not in by_norm.hint
    assert divergence(4, 0, "n0", loss=2.0, grad_norm=None, p=p, amp="fp16") is None


TINY = ("--model", "transformer", "--width", "32", "--depth", "1", "--samples", "512",
        "--eval-samples", "128", "--batch-size", "32", "--log-every", "2")


def test_a_run_forced_to_diverge_stops_at_its_first_non_finite_step() -> None:
    proc = train_cli(*TINY, "--max-steps", "12", "--optimizer", "sgd", "--lr", "1e6",
                     "--json", timeout=180)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    error = json.loads(proc.stdout)["error"]  # no summary: a diverged run never succeeds
    assert error["id"] == "training-diverged"
    assert error["message"].startswith("rank 0 (") and "training diverged at step " in \
        error["message"]
    step = int(error["message"].split("at step ")[1].split(":")[0])
    assert step < 12 and "lower --lr" in error["hint"]
    human = train_cli(*TINY, "--max-steps", "12", "--optimizer", "sgd", "--lr", "1e6")
    assert human.returncode == 1 and "trained" not in human.stdout
    assert f"training diverged at step {step}:" in human.stderr  # the same first step


def test_the_transformer_trains_with_its_defaults_on_cpu() -> None:
    got = train_json(*TINY, "--max-steps", "12")
    assert got["optimizer"]["optimizer"] == "adamw" and got["optimizer"]["clip"] == 1.0
    assert got["config"]["lr"] is None  # the flag was left to the model's default
    assert math.isfinite(got["final_loss"]) and math.isfinite(got["eval_loss"])
    assert got["steps"] == 12


def test_every_rank_stops_at_the_same_step_and_rank_0_prints_the_json_error() -> None:
    """The gradient norm is all-reduced, so both ranks see the divergence at once (no rank
    is left waiting in a collective); under --json rank 0's error object is stdout."""
    proc = train_cli(*TINY, "--local", "2", "--max-steps", "12", "--optimizer", "sgd",
                     "--lr", "1e6", "--json", timeout=180)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    error = json.loads(proc.stdout)["error"]
    assert error["id"] == "training-diverged" and error["message"].startswith("rank 0 (")
    step = error["message"].split("at step ")[1].split(":")[0]
    assert "[rank 1] ddpnet: error: rank 1 (" in proc.stderr
    assert f"training diverged at step {step}:" in proc.stderr.split("[rank 1]", 1)[1]
