"""The line every rank prints about rank 0's verdict."""

from __future__ import annotations

from ddpnet.check.causes import Cause
from ddpnet.check.coordinator import verdict_line


def test_verdict_line_names_the_root_cause() -> None:
    assert verdict_line(0, "n0", "198.18.0.1", "pass", None) == (
        "rank 0 n0 (198.18.0.1): ok (cluster verdict pass)")
    root = Cause("mtu-mismatch", "rank 1 has mtu 9000", "ip link set", ("n1",), (1,))
    line = verdict_line(2, "n2", "198.18.0.3", "fail", root)
    assert line == "rank 2 n2 (198.18.0.3): cluster verdict fail: mtu-mismatch: rank 1 has mtu 9000"
    assert verdict_line(2, "n2", "198.18.0.3", "fail", root.to_dict()) == line
