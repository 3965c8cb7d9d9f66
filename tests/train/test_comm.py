"""Bytes handed to all-reduce per step, per hook, against torch's own PowerSGD accounting."""

from __future__ import annotations

import pytest

from ddpnet.train.comm import allreduce_bytes, powersgd_compresses
from ddpnet.train.model import build_model, count_parameters

SHAPES = [(2500, 2500), (2500,), (4, 2500)]


def test_fp32_and_16_bit_hooks() -> None:
    numel = 2500 * 2500 + 2500 + 10000
    assert allreduce_bytes(SHAPES, "none") == 4 * numel
    assert allreduce_bytes(SHAPES, "bf16") == allreduce_bytes(SHAPES, "fp16") == 2 * numel


def test_powersgd_compresses_big_matrices_only() -> None:
    assert powersgd_compresses(2500, 2500, 4)
    assert not powersgd_compresses(4, 2500, 4)  # (4+2500)*4*2 > 10000: sent whole
    got = allreduce_bytes(SHAPES, "powersgd", powersgd_rank=4)
    assert got == 4 * ((2500 + 2500) * 4 + 2500 + 10000)
    assert got < allreduce_bytes(SHAPES, "none") / 100


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
def test_models_scale_with_width(name: str) -> None:
    small = count_parameters(build_model(name, 16, 2, 10))
    big = count_parameters(build_model(name, 64, 2, 10))
    assert big > 3 * small


def test_the_benchmark_mlp_is_about_25m_parameters() -> None:
    n = count_parameters(build_model("mlp", 5000, 2, 10))
    assert 24e6 < n < 26e6
