"""Path MTU: the DF-set UDP probes against a real echo, and rank 0's analysis of the rows."""

from __future__ import annotations

import socket
import time
from typing import Any

from ddpnet.check import loss, pmtu
from ddpnet.check.context import Findings
from ddpnet.check.pmtu import Echo, PeerMtu, analyze, probe_peer, probe_row, sizes
from ddpnet.check.registration import Registration
from ddpnet.check.stages.pathmtu import master_paths


def test_sizes_step_up_to_the_pairs_mtu() -> None:
    assert sizes(9000) == (1280, 1500, 2000, 4000, 8000, 9000)
    assert sizes(1500) == (1280, 1500)
    assert sizes(1000) == (1000,)


def test_every_size_crosses_loopback_to_a_real_echo() -> None:
    echo = Echo("127.0.0.1")
    try:
        got = probe_peer("127.0.0.1", echo.port, 9000)
    finally:
        echo.close()
    assert got == PeerMtu(9000, 9000, None, None) and not got.broken


def test_silence_is_not_judged() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as quiet:  # bound, never answers
        quiet.bind(("127.0.0.1", 0))
        got = probe_peer("127.0.0.1", quiet.getsockname()[1], 1500, timeout=0.3)
    assert got.ok == 0 and not got.broken
    assert analyze({0: {"1": got.to_dict()}}, {0: "a", 1: "b"}, {}) == []


def test_a_row_skips_this_ranks_own_address() -> None:
    echo = Echo("127.0.0.1")
    try:
        row = probe_row(0, "127.0.0.2", 1500, [None, ("127.0.0.1", echo.port, 9000),
                                               ("127.0.0.2", echo.port, 9000)])
    finally:
        echo.close()
    assert set(row) == {"1"} and row["1"]["ok"] == 1500  # the smaller MTU of the pair


class _Lossy:
    """An echo that drops packets above ``limit`` bytes always, and the first ``flaky``
    packets above 1500 bytes (a busy echo's full buffer)."""

    def __init__(self, limit: int, flaky: int = 0) -> None:
        import threading

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.limit, self.flaky, self.stop = limit, flaky, threading.Event()
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while not self.stop.is_set():
            try:
                data, peer = self.sock.recvfrom(65535)
            except OSError:
                continue
            if self.flaky > 0 and len(data) + 28 > 1500:
                self.flaky -= 1
                continue
            if len(data) + 28 <= self.limit:
                self.sock.sendto(data[:32], peer)

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


def test_a_size_lost_every_time_is_a_broken_path() -> None:
    hole = _Lossy(limit=1500)
    try:
        got = probe_peer("127.0.0.1", hole.port, 9000, timeout=0.6)
    finally:
        hole.close()
    assert got.broken and (got.ok, got.lost) == (1500, 2000)


def test_a_burst_lost_once_is_confirmed_alone_and_passes() -> None:
    busy = _Lossy(limit=9000, flaky=12)  # every big packet of the burst and its resends
    try:
        got = probe_peer("127.0.0.1", busy.port, 9000, timeout=0.3)
    finally:
        busy.close()
    assert not got.broken and got.ok == 9000


def _row(ok: int, lost: int | None, mtu: int = 9000) -> dict[str, object]:
    return PeerMtu(mtu, ok, lost).to_dict()


LABELS = {0: "n0 (10.0.0.1)", 1: "n1 (10.0.0.2)", 2: "n2 (10.0.0.3)"}
IFACES = {0: "eth0", 1: "eth0", 2: "ens1"}


def test_the_node_every_broken_pair_shares_is_named() -> None:
    good, bad = _row(9000, None), _row(1500, 2000)
    rows = {0: {"1": good, "2": bad}, 1: {"0": good, "2": bad}, 2: {"0": bad, "1": bad}}
    [cause] = analyze(rows, LABELS, IFACES)
    assert cause.id == "path-mtu" and cause.severity == "fail"
    assert cause.ranks == (2,) and cause.hosts == ("n2 (10.0.0.3)",)
    assert "the link of n2 (10.0.0.3)" in cause.detail and "MTU (9000)" in cause.detail
    assert "0->2 probes of 1500 bytes crossed, 2000 did not" in cause.detail
    assert "on n2 (10.0.0.3): ip link set dev ens1 mtu 1500" in cause.fix
    assert "ping -M do -s 1472" in cause.fix


def test_every_pair_broken_is_the_switch() -> None:
    bad = _row(1500, 2000)
    rows = {i: {str(j): bad for j in range(3) if j != i} for i in range(3)}
    [cause] = analyze(rows, LABELS, IFACES)
    assert cause.ranks == (0, 1, 2) and "every link between these nodes" in cause.detail


def test_the_kernels_path_mtu_is_shown_when_icmp_told_it() -> None:
    rows = {0: {"1": PeerMtu(9000, 1500, 2000, 1500).to_dict()}, 1: {"0": _row(9000, None)}}
    [cause] = analyze(rows, LABELS, IFACES)
    assert "path MTU 1500 (the kernel was told by ICMP)" in cause.detail


def test_healthy_rows_name_nothing() -> None:
    good = _row(9000, None)
    assert analyze({0: {"1": good}, 1: {"0": good}}, LABELS, IFACES) == []


def _findings(world: int) -> Findings:
    found = Findings(world=world, master="10.0.0.1:29500")
    found.roster = [Registration(r, world, 29500, f"n{r}", f"10.0.0.{r + 1}", "eth0", 1, "u")
                    for r in range(world)]
    return found


def test_ranks_that_stopped_on_their_path_to_rank_0_are_named_and_leave_the_stage() -> None:
    broken = PeerMtu(9000, 1500, 2000).to_dict()
    got: dict[int, dict[str, Any]] = {
        0: {"doctor": {}}, 1: {"doctor": {}, "to_rank0": _row(9000, None)},
        2: {"to_rank0": broken, "stopped": "path-mtu", "interface": "eth3"}}
    [cause] = master_paths(got, _findings(3))
    assert cause.stage == "facts" and cause.ranks == (2,) and "the link of n2" in cause.detail
    assert "ip link set dev eth3 mtu 1500" in cause.fix
    assert sorted(got) == [0, 1]  # no later stage waits for rank 2


def test_every_path_to_rank_0_broken_is_rank_0s_link_or_the_switch() -> None:
    broken = PeerMtu(9000, 1500, 2000).to_dict()
    got = {0: {}, **{r: {"to_rank0": broken, "stopped": "path-mtu"} for r in (1, 2)}}
    [cause] = master_paths(got, _findings(3))
    assert "every path to n0 (10.0.0.1) (n0 (10.0.0.1)'s link or the switch; the paths " \
        "between the others were not probed)" in cause.detail and sorted(got) == [0]


def test_a_peer_with_no_route_is_left_to_the_mesh_not_a_crash(monkeypatch: Any) -> None:
    # GLOO_SOCKET_IFNAME naming an interface only some nodes have: rank 0 advertises an
    # address in a network this node has no route to (ENETUNREACH at connect)
    import errno

    import ddpnet.check.pmtu as pmtu_mod

    def unreachable(address: str, port: int, mtu: int, timeout: float = 0) -> PeerMtu:
        raise OSError(errno.ENETUNREACH, "Network is unreachable")

    echo = Echo("127.0.0.1")
    try:
        real = pmtu_mod.probe_peer
        monkeypatch.setattr(pmtu_mod, "probe_peer", lambda a, p, m, timeout=0.5: (
            unreachable(a, p, m) if a == "198.19.253.1" else real(a, p, m)))
        row = probe_row(0, "127.0.0.2", 1500, [None, ("198.19.253.1", 9, 1500),
                                               ("127.0.0.1", echo.port, 1500)])
    finally:
        echo.close()
    assert set(row) == {"2"}  # the unreachable peer is not an MTU finding


def test_rank_0_unreachable_from_a_worker_is_not_probed(monkeypatch: Any) -> None:
    import errno
    from types import SimpleNamespace

    import ddpnet.check.pmtu as pmtu_mod
    from ddpnet.check.stages import pathmtu

    def unreachable(*args: Any, **kwargs: Any) -> PeerMtu:
        raise OSError(errno.ENETUNREACH, "Network is unreachable")

    monkeypatch.setattr(pmtu_mod, "probe_peer", unreachable)
    monkeypatch.setattr(pathmtu, "interface_mtu", lambda name: 1500)
    store = SimpleNamespace(get=lambda key, timeout: ["198.19.253.1", 9, 1500])
    ctx = SimpleNamespace(store=store, sel=SimpleNamespace(interface="eth0"),
                          address="198.18.0.3")
    assert pathmtu.probe_master(ctx) is None  # type: ignore[arg-type]


def test_echoes_reads_only_its_tags_numbers_until_the_deadline() -> None:
    """The one reader of both probes' echoes: the path-MTU sizes after MAGIC, the loss
    probe's sequence numbers after its own tag; a datagram of the other kind is skipped."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
        rx.bind(("127.0.0.1", 0))
        for data in (pmtu.MAGIC + b"001400", loss.TAG + b"000007", b"junk",
                     pmtu.MAGIC + b"xx", pmtu.MAGIC + b"009000"):
            tx.sendto(data, rx.getsockname())
        start = time.monotonic()
        assert list(pmtu.echoes(rx, pmtu.MAGIC, start + 0.3)) == [1400, 9000]
        assert time.monotonic() - start >= 0.3  # waited for more until the deadline
        tx.sendto(loss.TAG + b"000042", rx.getsockname())
        assert list(pmtu.echoes(rx, loss.TAG, time.monotonic() + 0.2)) == [42]
