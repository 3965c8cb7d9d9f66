"""MFU: the peak table's lookup by CUDA device name, which column a precision uses, and the
arithmetic (pure)."""

from __future__ import annotations

import math

import pytest

from ddpnet.train.peaks import PEAKS, lookup, peak_key, utilisation


@pytest.mark.parametrize(("name", "row"), [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200 SXM"),
    ("NVIDIA H200 NVL", "H200 NVL"),
    ("NVIDIA GH200 480GB", "GH200"),
    ("NVIDIA A100-SXM4-80GB", "A100"),
    ("NVIDIA A100 80GB PCIe", "A100"),
    ("NVIDIA L40S", "L40S"),
    ("NVIDIA L4", "L4"),
    ("NVIDIA A10", "A10"),
    ("Tesla V100-SXM2-16GB", "V100 SXM2"),
    ("Tesla V100-PCIE-32GB", "V100 PCIe"),
    ("Tesla T4", "T4"),
])
def test_device_names_find_their_row(name: str, row: str) -> None:
    found = lookup(name)
    assert found is not None and found.name == row


def test_unknown_devices_have_no_row_and_every_row_is_sourced() -> None:
    assert lookup("NVIDIA GeForce RTX 4090") is None
    for p in PEAKS:
        assert p.source and p.fp32 > 0 and p.fp16 >= p.fp32
        # a tensor-core column is dense: bf16 twice tf32 on every GPU that has both
        if p.tf32 is not None and p.bf16 is not None:
            assert p.bf16 == pytest.approx(2 * p.tf32, rel=0.02)


def test_the_precision_picks_the_column() -> None:
    assert peak_key("bf16", True) == "bf16" and peak_key("fp16", False) == "fp16"
    assert peak_key("fp32", True) == "tf32" and peak_key("fp32", False) == "fp32"


def test_mfu_is_model_flops_per_second_over_the_peak() -> None:
    # 9.9 TFLOP per step in 20 ms on an H100 SXM in bf16: 495 TFLOP/s, 50% of 989.4
    u = utilisation(9.9e12, 0.020, device="cuda:0", device_name="NVIDIA H100 80GB HBM3",
                    precision="bf16", tf32=True)
    assert u.tflops == pytest.approx(495.0)
    assert (u.gpu, u.peak_of, u.peak_tflops) == ("H100 SXM", "bf16", 989.4)
    assert u.mfu == pytest.approx(495.0 / 989.4)
    fp32 = utilisation(9.9e12, 0.040, device="cuda:0", device_name="NVIDIA H100 80GB HBM3",
                       precision="fp32", tf32=False)
    assert (fp32.peak_of, fp32.peak_tflops) == ("fp32", 67.0)
    assert fp32.mfu == pytest.approx(247.5 / 67.0)  # >1: the run used TF32 after all


@pytest.mark.parametrize(("device", "name", "precision", "why"), [
    ("cpu", "cpu", "fp32", "CPU"),
    ("cuda:0", "NVIDIA GeForce RTX 4090", "bf16", "not in"),
    ("cuda:0", "Tesla T4", "bf16", "no bf16"),
])
def test_no_mfu_says_why(device: str, name: str, precision: str, why: str) -> None:
    u = utilisation(1e9, 0.01, device=device, device_name=name, precision=precision, tf32=True)
    assert u.mfu is None and u.peak_tflops is None and why in u.source
    assert u.tflops == pytest.approx(0.1)
    assert u.to_dict()["mfu"] is None


def test_an_unmeasured_step_has_no_rate() -> None:
    u = utilisation(1e9, float("nan"), device="cuda:0", device_name="NVIDIA L4",
                    precision="bf16", tf32=True)
    assert math.isnan(u.tflops) and u.mfu is None
