"""``ddpnet train`` on two real gloo ranks with the watch on: the comm hook that times DDP's
bucket all-reduces (gloo's Flight Recorder gives them no end time) lets the hub name a rank
that is slow *before* backward, in its data loader, as a straggler with its rank and host;
a healthy run names nobody. Both warn only: every rank exits 0."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from ddpnet.local import LocalRanks
from ddpnet.train.config import TrainConfig
from tests.conftest import clean_environ

WORKER = str(Path(__file__).with_name("straggler_worker.py"))


def run(tmp_path: Path, slow_s: float, hook: str = "none", steps: int = 60,
        step_s: float = 0.02) -> tuple[str, list[dict[str, object]]]:
    """Train ``steps`` steps (``step_s`` asleep each on every rank, rank 1 ``slow_s`` more in
    data): the hub analyses once 10 steps are published, then every 5 s. Rank 0's stderr and
    the hub's warnings."""
    cfg = TrainConfig(max_steps=steps, samples=8192, batch_size=16, step_sleep_s=step_s,
                      log_every=1000, comm_hook=hook, powersgd_start_iter=2)
    env = clean_environ({"DDPNET_WATCH_DIR": str(tmp_path), "SLOW_S": str(slow_s),
                         "OMP_NUM_THREADS": "1"})
    with LocalRanks([sys.executable, WORKER, json.dumps(cfg.to_dict())], 2, capture=True,
                    environ=env) as ranks:
        result = ranks.wait(timeout=150)
    assert result.code == 0, [e.stderr[-2000:] for e in result.exits]
    path = tmp_path / "warnings.json"
    warnings = json.loads(path.read_text()) if path.exists() else []
    return result.exits[0].stderr, warnings


# none: torch's allreduce_hook, timed (async, like fp16/bf16); powersgd: ddpnet's hook, which
# waits for its collectives inside the hook
@pytest.mark.parametrize("hook", ["none", "powersgd"])
def test_a_rank_slow_in_its_data_loader_is_named(tmp_path: Path, hook: str) -> None:
    stderr, warnings = run(tmp_path, 0.06, hook)
    assert [w["kind"] for w in warnings] == ["straggler"], stderr[-3000:]
    [found] = warnings
    assert found["ranks"] == [1] and found["hosts"] == [socket.gethostname()]
    assert str(found["summary"]).startswith(f"rank 1 ({socket.gethostname()}"), found
    assert "computes" in str(found["summary"])
    assert "ddpnet: watch: warning: straggler: rank 1" in stderr


def test_a_healthy_run_names_nobody(tmp_path: Path) -> None:
    """Equal ranks, each step mostly the same sleep: on a loaded machine the scheduler alone
    made one rank's 20 ms step consistently 25 % longer (a straggler in truth, named in a CI
    run); a 100 ms step needs 25 ms of extra compute a step to be one."""
    stderr, warnings = run(tmp_path, 0.0, steps=70, step_s=0.1)  # 7 s+: analysed at least once
    assert warnings == [] and "straggler" not in stderr, (warnings, stderr[-2000:])
