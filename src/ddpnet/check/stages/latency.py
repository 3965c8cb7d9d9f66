"""After the mesh and the bandwidth: what the round trips name (``check.latency``), judged
with the rates measured and every host's TCP buffer sysctls, as its doctor read them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ddpnet.check import latency
from ddpnet.check.context import Findings


def where(found: Findings, got: Mapping[int, Mapping[str, Any]]) -> latency.Where:
    """Each rank's label, address and interface, and the cluster subnet (pure)."""
    ranks = range(found.world)
    return latency.Where(
        labels=found.labels,
        addresses=[str(got[r].get("address") or "") or None if r in got else None
                   for r in ranks],
        interfaces=[str(got[r].get("interface") or "") or None if r in got else None
                    for r in ranks],
        subnet=str((got.get(0) or {}).get("subnet") or "<cluster-subnet>"))


def healthy_rates(found: Findings) -> dict[tuple[int, int], float]:
    """The measured rates but those through a node already named slow (pure): a
    rate-limited node beside a delayed one must not set what a link here carries."""
    slow = {r for c in found.causes if c.id == "slow-node" for r in c.ranks}
    return {p: v for p, v in found.rates.items() if not slow & set(p)}


def judge(found: Findings, got: Mapping[int, Mapping[str, Any]]) -> None:
    """Rank 0, last: ``high-latency`` for what the mesh's round trips found, in the stage
    that measured the rates it judges (the matrix's, else the reachability ring's)."""
    if found.latency is None:
        return
    stage = "bandwidth" if "bandwidth" in found.stages else "reachability"
    named = latency.causes(found.latency, healthy_rates(found), found.windows,
                           where(found, got), stage)
    found.causes.extend(named)
    if any(c.severity == "fail" for c in named):
        found.stages[stage] = "fail"
    elif named and stage == "bandwidth" and found.stages.get(stage) == "pass":
        found.stages[stage] = "warn"
