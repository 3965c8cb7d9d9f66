"""PyTorch Lightning's Trainer under the watch, unchanged (``trainers_lab``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ddpnet.lab import Lab
from tests.lab_util import fresh_lab, requires_netns
from tests.watch import trainers_lab

pytestmark = requires_netns
SCRIPT = "lightning_trainer.py"
PORT = 29811


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with fresh_lab("tl", nodes=2) as lab:
        yield lab


def test_healthy_with_validation_and_checkpoints_same_loss_unwatched(lab: Lab,
                                                                     tmp_path: Path) -> None:
    trainers_lab.healthy(lab, SCRIPT, PORT, tmp_path)


@pytest.mark.parametrize("fault", ["stop", "kill", "link-down"])
def test_a_fault_is_named_with_rank_and_host_and_every_rank_is_out(
        lab: Lab, tmp_path: Path, fault: str) -> None:
    trainers_lab.faulty(lab, SCRIPT, PORT + 2 + ["stop", "kill", "link-down"].index(fault),
                        tmp_path, fault)


def test_lightnings_own_sigterm_handling_ends_the_job_as_unwatched(lab: Lab,
                                                                   tmp_path: Path) -> None:
    """Lightning's handler (installed at fit, over the watch's) stops the fit gracefully:
    SIGTERMException on every rank, the job ends as it does with DDPNET_WATCH=0."""
    trainers_lab.preempted(lab, SCRIPT, PORT + 6, tmp_path,
                           "exception SIGTERMException sigterm True")
