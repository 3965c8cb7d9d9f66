"""PyTorch Lightning's Trainer under the watch, unchanged (``trainers_lab``: healthy, stopped, killed,
link down)."""

from __future__ import annotations

from pathlib import Path

from ddpnet.lab import Lab
from tests.lab_util import requires_netns
from tests.watch import trainers_lab

pytestmark = requires_netns
SCRIPT = "lightning_trainer.py"
PORT = 29811

(lab, test_healthy_with_validation_and_checkpoints_same_loss_unwatched,
 test_a_fault_is_named_with_rank_and_host_and_every_rank_is_out) = \
    trainers_lab.matrix(SCRIPT, "tl", PORT)


def test_lightnings_own_sigterm_handling_ends_the_job_as_unwatched(lab: Lab,
                                                                   tmp_path: Path) -> None:
    """Lightning's handler (installed at fit, over the watch's) stops the fit gracefully:
    SIGTERMException on every rank, the job ends as it does with DDPNET_WATCH=0."""
    trainers_lab.preempted(lab, SCRIPT, PORT + 6, tmp_path,
                           "exception SIGTERMException sigterm True")
