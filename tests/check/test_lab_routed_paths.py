"""Routing that differs per node (issue 29): a 3-node lab where node 2 sits in a routed
subnet (``--routed 2``) and node 1 lacks the static route to it. Plain torch breaks; ``check``
names node 1 (not node 2's interface, not a firewall) with the gateway the others use, and
that route makes both work."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ddpnet.lab import Lab
from tests.check.labcheck import run_check
from tests.check.test_lab_paths import FAST, _diag, plain_torch
from tests.lab_util import fresh_lab, requires_netns

pytestmark = [requires_netns, pytest.mark.root, pytest.mark.slow]


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with fresh_lab("rtp", nodes=3, behind=(2,), router="routed") as lab:
        yield lab


def test_a_static_route_missing_on_one_node_is_named_there(clean: Lab) -> None:
    n1, rt = clean.nodes[1], clean.plan.router
    assert rt is not None
    clean.fault("no-route", 1)
    plain = plain_torch(clean)
    assert "ok" not in plain.values(), plain  # node 2 dials node 1, whose replies cannot go
    runs = run_check(clean, FAST, timeout=60)
    report = runs[0].json()
    cause = report["root_cause"]
    assert runs[0].returncode == 1 and cause["id"] == "missing-route", _diag(runs)
    print(f"time to verdict missing-route: {runs[0].seconds:.1f} s "
          f"(check's own total {report['timings']['total']:.1f} s)")
    assert cause["ranks"] == [1] and n1.hostname in cause["hosts"][0]
    assert f"has no route to {rt.subnet}" in cause["detail"]
    fix = f"ip route add {rt.subnet} via {rt.outer} dev eth0"
    assert fix in cause["fix"]
    # node 2 is not told to pick another interface, nobody is told to open a firewall
    assert not [c for c in report["causes"] if c["id"] in ("interface-mismatch",
                                                           "peer-port-blocked")], _diag(runs)
    clean.exec(1, fix.split())
    runs = run_check(clean, FAST, timeout=60)
    assert runs[0].returncode == 0, _diag(runs)  # a routed cluster passes (with a warning)
    assert set(plain_torch(clean).values()) == {"ok"}
