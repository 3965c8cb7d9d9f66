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


def test_one_lossy_host_among_4096_on_a_two_neighbour_ring_is_the_only_one_named() -> None:
    # a sampled mesh's host ring: each rank probes the next two; rank 2900 loses 5 %
    world, bad = 4096, 2900
    rows = {i: {str((i + d) % world): [200, 180 if bad in (i, (i + d) % world) else 200]
                for d in (1, 2)} for i in range(world)}
    labels = [f"h{i}" for i in range(world)]
    [cause] = loss.analyze(rows, labels)
    assert cause.ranks == (bad,) and cause.hosts == ("h2900",) and cause.severity == "fail"
    assert "(80 of 800 round trips)" in cause.detail


class _Echo:
    """A UDP echo on loopback that drops every ``drop``-th probe, or answers each only after
    ``delay`` seconds (a peer too busy to answer in time)."""

    def __init__(self, drop: int = 0, delay: float = 0.0, pause_after: int = 0) -> None:
        import socket
        import threading

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.drop, self.delay, self.seen, self.pause_after = drop, delay, 0, pause_after
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        import time

        while True:
            try:
                data, peer = self.sock.recvfrom(64)
            except OSError:
                return
            self.seen += 1
            if self.drop and self.seen % self.drop == 0:
                continue
            time.sleep(self.delay + (0.8 if self.seen == self.pause_after else 0.0))
            try:
                self.sock.sendto(data[:32], peer)
            except OSError:  # closed while sleeping
                return

    def close(self) -> None:
        self.sock.close()


def test_a_lossy_peer_is_judged_and_a_peer_answering_late_is_not() -> None:
    lossy = _Echo(drop=10)
    try:
        assert loss.probe_peer("127.0.0.1", lossy.port, count=50, wait=0.3) == (50, 45, False)
    finally:
        lossy.close()
    slow = _Echo(delay=0.02)  # 50 echoes take 1 s; the probe stops after 0.4 s
    try:
        sent, echoed, late = loss.probe_peer("127.0.0.1", slow.port, count=50, wait=0.3,
                                             cap=0.4)
    finally:
        slow.close()
    assert sent == 50 and 5 < echoed < 50 and late
    # a peer that stalls longer than ``wait`` mid-burst, then answers all: nothing lost (the
    # marker after the burst comes back behind every echo)
    paused = _Echo(pause_after=20)
    try:
        assert loss.probe_peer("127.0.0.1", paused.port, count=50, wait=0.3) == (50, 50, False)
    finally:
        paused.close()
    # a late count is published with a third item, and rank 0 does not judge it
    rows = {0: {"1": [200, 150, 1]}, 1: {"0": [200, 200]}, 2: {"0": [200, 200]}}
    assert loss.analyze(rows, ["n0", "n1", "n2"]) == []
