"""`digits` (scikit-learn's bundled 8x8 digits) reaches > 0.9 eval accuracy in a short CPU run
on two ranks; the README quotes this run."""

from __future__ import annotations

import pytest

from tests.train.helpers import train_json

pytestmark = pytest.mark.slow


def test_digits_reaches_ninety_percent() -> None:
    summary = train_json("--local", "2", "--dataset", "digits", "--model", "mlp", "--width",
                         "64", "--epochs", "6", "--batch-size", "32", "--lr", "0.05",
                         "--log-every", "50")
    assert summary["steps"] == 6 * (1437 // 64)
    assert summary["eval_accuracy"] > 0.9, summary
    assert summary["config"]["dataset"] == "digits"
