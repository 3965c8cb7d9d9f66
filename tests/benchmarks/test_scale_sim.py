"""benchmarks/scale_sim.py at 256 simulated ranks: rank 0 real, 255 ranks as threads that run
the worker's own code, on a two-node lab (one lab for both points)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.lab_util import requires_netns

pytestmark = requires_netns

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "scale_sim.py"
RANKS = 256  # above 64: the sampled mesh, as at 1,024


@pytest.fixture(scope="module")
def sim() -> ModuleType:
    spec = importlib.util.spec_from_file_location("scale_sim", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["scale_sim"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def points(sim: ModuleType) -> Iterator[dict[str, dict[str, Any]]]:
    with sim.sim_lab(RANKS) as lab:
        # every rank a host of its own: 255 hosts' loss, MTU and stream probes
        yield {"healthy": sim.run_in(lab, "check", RANKS, None, 90.0, per_node=1),
               "filtered": sim.run_in(lab, "check", RANKS, "filtered-port", 90.0, per_node=1),
               # 8 ranks a node, as on GPU nodes: one rank a host probes and streams
               "slow": sim.run_in(lab, "check", RANKS, "slow-link", 90.0, per_node=8)}


def test_256_healthy_simulated_ranks_pass_and_every_rank_prints_the_verdict(
        points: dict[str, dict[str, Any]]) -> None:
    p = points["healthy"]
    assert p["verdict"] == "pass", p
    assert p["clients"]["finished"] == RANKS - 1 and p["clients"]["ok_lines"] == RANKS - 1, p
    # warnings that time something, on 2 cores shared by 255 simulated nodes: a clock read
    # late (skew), a node whose two ring streams both ran while its process was starved
    timed = ("clock-skew", "slow-node")
    assert not [c for c in p["causes"] if c["id"] not in timed], p
    assert all(c["severity"] == "warn" for c in p["causes"]), p
    # the sampled mesh: no O(N^2) matrix in the report, and the store served O(N log N)
    assert p["report_json_bytes"] < 400_000 and p["store_bytes_served"] < 20_000_000, p


def test_one_node_filtering_its_ports_among_256_is_named_with_its_host(
        points: dict[str, dict[str, Any]]) -> None:
    p = points["filtered"]
    assert p["verdict"] == "fail", p
    # every simulated rank publishes node 1's real facts, whose firewall read cannot see the
    # rule dropping one simulated address: its own doctor "found no rule", so the cause is
    # peer-unreachable (filtered outside the host) rather than peer-port-blocked
    blocked = [c for c in p["causes"] if c["id"] in ("peer-port-blocked", "peer-unreachable")]
    assert [c["hosts"] for c in blocked] == [[p["faulty_host"]]], p
    assert p["faulty_host_named"] is True


def test_a_node_shaped_to_10_mbits_among_32_nodes_of_8_ranks_is_named_by_the_ring_stream(
        points: dict[str, dict[str, Any]]) -> None:
    p = points["slow"]
    assert p["ranks_per_node"] == 8 and p["verdict"] == "pass", p  # a warning: slow, not down
    slow = [c for c in p["causes"] if c["id"] == "slow-node"]
    # the shaped node, and at most one a starved stream made look slow (see above)
    assert [p["faulty_host"]] in [c["hosts"] for c in slow] and len(slow) <= 2, p
    # one stream a host: 32 simulated nodes and rank 0's
    assert any(n.startswith("bandwidth: 33 ring links") for n in p["notes"]), p
