"""Run ``ddpnet train`` for real and read what it left behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from tests.conftest import clean_environ


def train_cli(*args: str, timeout: float = 180, env: dict[str, str] | None = None
              ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ddpnet", "train", *args],
                          env=clean_environ(env), capture_output=True, text=True,
                          timeout=timeout)


def train_json(*args: str, timeout: float = 180) -> dict[str, Any]:
    proc = train_cli(*args, "--json", timeout=timeout)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    summary: dict[str, Any] = json.loads(proc.stdout)
    return summary


def final_params(directory: Path) -> dict[str, torch.Tensor]:
    """Model parameters of the newest checkpoint in ``directory``."""
    newest = max(directory.glob("ckpt-*.pt"))
    state = torch.load(newest, map_location="cpu", weights_only=False)
    params: dict[str, torch.Tensor] = state["model"]
    return params


def max_abs_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)
