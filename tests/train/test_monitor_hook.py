"""``ddpnet train --monitor``: every rank samples the interface its process group uses, and
rank 0's summary carries each rank's telemetry."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import pytest

from ddpnet.lab import Lab
from tests.conftest import RunCli
from tests.lab_util import requires_netns


def _check(telemetry: list[dict[str, object]], world: int, iface: str) -> None:
    assert sorted(t["rank"] for t in telemetry) == list(range(world))
    for t in telemetry:
        assert t["samples"] >= 2, t  # type: ignore[operator]
        per_if = t["interfaces"]
        assert list(per_if) == [iface], t  # type: ignore[call-overload]
        stats = per_if[iface]  # type: ignore[index]
        # gradients cross this interface: DDP traffic is seen, not zeros
        assert stats["tx_gbps_max"] > 0 and stats["rx_gbps_max"] > 0, t


def test_local_ranks_report_loopback_telemetry(run_cli: RunCli) -> None:
    proc = run_cli("train", "--local", "2", "--monitor", "--monitor-interval", "0.1",
                   "--width", "512", "--max-steps", "150", "--log-every", "1000", "--json",
                   timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    _check(summary["telemetry"], 2, "lo")


def test_bad_monitor_interval_is_a_usage_error(run_cli: RunCli) -> None:
    proc = run_cli("train", "--monitor", "--monitor-interval", "0.001")
    assert proc.returncode == 2 and "hint:" in proc.stderr and "Traceback" not in proc.stderr


@requires_netns
@pytest.mark.slow
def test_lab_nodes_report_their_lab_interface(make_lab: Callable[..., Lab]) -> None:
    lab = make_lab("trm", fork=True, nodes=2, rate="1gbit")
    results = lab.run([sys.executable, "-m", "ddpnet", "train", "--monitor",
                       "--monitor-interval", "0.2", "--width", "512", "--max-steps", "120",
                       "--log-every", "1000", "--json"], timeout=240)
    assert all(r.returncode == 0 for r in results), [r.stderr[-1500:] for r in results]
    rank0 = next(r for r in results if r.node.index == 0)
    _check(json.loads(rank0.stdout)["telemetry"], 2, "eth0")
