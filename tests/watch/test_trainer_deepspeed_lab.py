"""DeepSpeed (its CPU accelerator) under the watch, unchanged (``trainers_lab``: healthy, stopped, killed,
link down)."""

from __future__ import annotations

from tests.lab_util import requires_netns
from tests.watch import trainers_lab

pytestmark = requires_netns
SCRIPT = "deepspeed_loop.py"
PORT = 29861

(lab, test_healthy_with_validation_and_checkpoints_same_loss_unwatched,
 test_a_fault_is_named_with_rank_and_host_and_every_rank_is_out) = \
    trainers_lab.matrix(SCRIPT, "td", PORT)
