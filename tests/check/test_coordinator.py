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


def test_every_rank_reads_the_verdict_and_its_line_not_the_whole_root_cause() -> None:
    """The result is read by every rank: a root cause's evidence (a line per rank named)
    read N times was O(N^2) bytes from rank 0's store (280 MB at 4,096 ranks)."""
    from ddpnet.check.coordinator import result_record

    evidence = tuple(f"rank {r} on sim{r:05d}: clock +1.10 s from rank 0's" for r in range(500))
    root = Cause("clock-skew", "clocks differ", "timedatectl set-ntp true", ("n1",), (1,),
                 severity="warn", evidence=evidence)
    record = result_record("pass", root)
    assert record == {"verdict": "pass", "root": {"id": "clock-skew", "detail": "clocks differ"}}
    line = verdict_line(3, "n3", "198.18.0.4", "pass", record["root"])  # type: ignore[arg-type]
    assert line == verdict_line(3, "n3", "198.18.0.4", "pass", root)
    assert result_record("pass", None) == {"verdict": "pass", "root": None}
