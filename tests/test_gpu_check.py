"""``make gpu-check`` on CPU: the script skips with one line and exit 0 where torch sees no
CUDA device (what CI sees), and the summary it writes on a GPU has a tested schema (built by
a pure function from each step's output)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


gc = _module()


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


@pytest.mark.skipif(_cuda(), reason="this machine has CUDA: gpu-check would run")
def test_without_cuda_the_script_skips_in_one_line_and_writes_nothing() -> None:
    result = ROOT / "benchmarks" / "results" / "gpu_check.json"
    before = result.stat().st_mtime_ns if result.exists() else None
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-check.sh")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and proc.stderr == "", (proc.stdout, proc.stderr)
    assert lines[0].startswith("gpu-check: skipped: torch sees no CUDA device on ")
    assert (result.stat().st_mtime_ns if result.exists() else None) == before


def _train(sps: float, mfu: float | None, precision: str) -> dict[str, Any]:
    return {"samples_per_s": sps, "step_time_s": 1024 / sps, "model_tflops": 400.0,
            "mfu": mfu, "tf32": True, "eval_accuracy": 0.9, "final_loss": 0.3,
            "comm_share": 0.01, "parameters": 201_488_394, "precision": precision,
            "device_name": "NVIDIA H100 80GB HBM3", "utilisation": {"peak_of": precision}}


def _outcomes() -> dict[str, Any]:
    """A run's steps as the H100 evidence's files had them (shared/evidence/gpu-h100)."""
    Out = gc.Outcome
    doctor = {"verdict": "warn", "facts": {
        "gpus": ["NVIDIA H100 80GB HBM3"], "gpu_capabilities": ["9.0"], "driver": "580.159.04",
        "cuda": "13.0", "nccl": "2.28.9", "torch": "2.11.0+cu130", "python": "3.12.3"}}
    bench = {"link": {"gbps": 4.777353576746647, "method": "iperf3"},
             "plateau": {"all_reduce": {"busbw_gbps": 4.800747, "link_efficiency": 1.0049}},
             "verdicts": ["all_reduce reaches 100% of the link at the plateau"]}
    mtu = {"verdict": "fail", "root_cause": {"id": "mtu-mismatch", "hosts": ["g-n1"],
                                             "fix": "on g-n1: ip link set dev eth0 mtu 1500"}}
    return {
        "doctor": Out(0, 4.4, data=doctor),
        "tests_gpu": Out(0, 89.0, data=gc.pytest_counts("6 passed in 89.01s")),
        "train_fp32": Out(0, 30.0, data=_train(40000.0, 0.55, "fp32")),
        "train_bf16": Out(0, 25.0, data=_train(70000.0, 0.45, "bf16")),
        "train_fp16": Out(0, 25.0, data=_train(69000.0, 0.44, "fp16")),
        "bench": Out(0, 40.0, data=bench),
        "check_healthy": Out(0, 15.0, data={"verdict": "pass", "root_cause": None}),
        "check_mtu": Out(0, 15.0, data=mtu, note="expected mtu-mismatch, named mtu-mismatch"),
        "check_blocked_port": Out(0, 20.0, data={"root_cause": {"id": "missing-ranks"}},
                                peer={"causes": [{"id": "master-port-filtered"}]}),
        "lab_train_plain": Out(0, 30.0, data=_train(2000.0, 0.01, "fp32")),
        "watch": Out(None, note="missing: benchmarks/watch_detect.py"),
    }


def test_the_summary_carries_every_figure_the_issue_asks_for() -> None:
    s = gc.build_summary(_outcomes(), host="h100", when="2026-11-27T22:00:00Z", wall_s=430.0)
    assert gc.problems(s) == []
    assert s["device"] == {"name": "NVIDIA H100 80GB HBM3", "count": 1, "capability": "9.0",
                           "driver": "580.159.04", "cuda": "13.0", "nccl": "2.28.9",
                           "torch": "2.11.0+cu130", "python": "3.12.3"}
    assert s["busbw_over_iperf3"] == pytest.approx(4.800747 / 4.777353576746647)
    assert s["bf16_speedup_over_fp32"] == pytest.approx(70000 / 40000)
    assert s["mfu"] == {"fp32": 0.55, "bf16": 0.45, "fp16": 0.44}
    assert s["goals"] == {"bf16_speedup_over_fp32": True, "mfu_bf16": True,
                          "busbw_over_iperf3": True}
    assert s["tests_gpu"] == {"passed": 6, "failed": 0, "skipped": 0, "errors": 0}
    assert s["check"]["mtu"]["root_cause"] == "mtu-mismatch"
    assert s["check"]["blocked_port"]["peer_cause"] == "master-port-filtered"
    assert s["watch"]["status"] == "missing" and s["within_budget"] is True
    assert s["steps"]["check_mtu"]["status"] == "pass"
    # a step that never ran is in the summary as None figures, not missing keys
    assert s["train_nccl"]["powersgd"]["samples_per_s"] is None
    import json

    assert json.loads(json.dumps(s)) == s  # plain JSON


def test_a_run_with_nothing_measured_is_still_a_valid_summary() -> None:
    s = gc.build_summary({}, host="h", when="w", wall_s=500.0)
    assert gc.problems(s) == []
    assert s["bf16_speedup_over_fp32"] is None and s["busbw_over_iperf3"] is None
    assert s["goals"] == dict.fromkeys(gc.GOALS)  # unknown, not failed
    assert s["within_budget"] is False and s["watch"]["status"] == "skipped"


def test_problems_name_what_is_missing_or_mistyped() -> None:
    s = gc.build_summary(_outcomes(), host="h", when="w", wall_s=1.0)
    broken = {k: v for k, v in s.items() if k != "mfu"}
    assert gc.problems(broken) == ["mfu: missing"]
    assert gc.problems({**s, "busbw_over_iperf3": "1.0"}) == [
        "busbw_over_iperf3: str, want float/NoneType"]
    assert gc.problems({**s, "mfu": {"fp32": 0.5, "bf16": "x"}}) == [
        "mfu.bf16: missing or not a number", "mfu.fp16: missing or not a number"]
    device = {k: v for k, v in s["device"].items() if k != "nccl"}
    assert gc.problems({**s, "device": device}) == ["device.nccl: missing"]


def test_step_status_and_pytest_counts() -> None:
    Out = gc.Outcome
    assert [Out(0).status, Out(1).status, Out(124, timed_out=True).status] == [
        "pass", "exit 1", "timeout"]
    assert Out(None, note="skipped: 12 s of the budget left").status == "skipped"
    assert gc.pytest_counts("1 failed, 5 passed, 2 skipped, 1 error in 3.0s") == {
        "passed": 5, "failed": 1, "skipped": 2, "errors": 1}
