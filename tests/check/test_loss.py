"""check.loss: the node every path through which loses is named with the loss measured
(pure), and the probe counts a real echo's answers on loopback."""

from __future__ import annotations

from ddpnet.check import loss
from ddpnet.check.pmtu import Echo

LABELS = ["n0", "n1", "n2", "n3"]


def _rows(lossy: int | None, echoed: int = 190) -> dict[int, dict[str, list[int]]]:
    return {i: {str(j): [200, echoed if lossy in (i, j) else 200]
                for j in range(4) if j != i} for i in range(4)}


def test_a_node_losing_five_percent_is_named_as_a_failure_with_the_loss() -> None:
    [cause] = loss.analyze(_rows(2), LABELS)
    assert cause.id == "packet-loss" and cause.ranks == (2,) and cause.severity == "fail"
    assert "5.0% of the probes on every path through rank 2 on n2 were lost (60 of 1200" \
        in cause.detail and "0.0%" in cause.detail and "TCP" in cause.detail
    assert "ethtool -S" in cause.fix and cause.see_for_yourself


def test_one_percent_is_a_warning_and_a_clean_mesh_names_nothing() -> None:
    [cause] = loss.analyze(_rows(1, echoed=197), LABELS)
    assert cause.severity == "warn" and cause.ranks == (1,)
    assert loss.analyze(_rows(None), LABELS) == []


def test_loss_everywhere_names_no_single_node_and_unanswered_pairs_are_not_judged() -> None:
    everywhere = {i: {str(j): [200, 180] for j in range(4) if j != i} for i in range(4)}
    assert loss.analyze(everywhere, LABELS) == []
    filtered = _rows(None)
    filtered[0]["3"] = [200, 0]  # UDP filtered: not loss
    assert loss.analyze(filtered, LABELS) == []


def test_neighbours_are_bounded_and_probes_count_real_echoes() -> None:
    assert loss.neighbours(0, 3) == [1, 2] and len(loss.neighbours(5, 1000)) == 8
    echo = Echo("127.0.0.1")
    try:
        row = loss.probe_row(0, [None, ("127.0.0.1", echo.port, 1500)])
    finally:
        echo.close()
    assert row == {"1": [loss.COUNT, loss.COUNT]}
