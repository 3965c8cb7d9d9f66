"""Counter fixtures give exact rates."""

from __future__ import annotations

import threading
import time

import pytest

from ddpnet.monitor.rates import compute
from ddpnet.monitor.recorder import Recorder
from ddpnet.monitor.sampler import samples
from ddpnet.monitor.sources import SocketBytes
from tests.monitor.fixtures import FakeSources, counters, snap


def test_interface_rates_are_exact() -> None:
    a = snap(100.0, counters(0, 0, 0, 0), retrans=10, out=1000)
    # 2 s later: 250 MB in (1 Gb/s), 125 MB out (0.5 Gb/s), 3 new errors, 1 drop
    b = snap(102.0, counters(250_000_000, 125_000_000, 2000, 1000, errors=3, drops=1),
             retrans=30, out=3000)
    s = compute(a, b, ["eth0"])
    (eth,) = s.interfaces
    assert eth.rx_gbps == pytest.approx(1.0)
    assert eth.tx_gbps == pytest.approx(0.5)
    assert eth.rx_pps == pytest.approx(1000) and eth.tx_pps == pytest.approx(500)
    assert eth.link_gbps == 1.0 and eth.utilisation == pytest.approx(1.0)
    assert (eth.errors, eth.drops) == (3, 1)
    assert s.retrans_per_s == pytest.approx(10.0)
    assert s.retrans_ratio == pytest.approx(0.01)


def test_counter_reset_counts_as_zero_not_negative() -> None:
    s = compute(snap(0, counters(10**9, 10**9)), snap(1, counters(5, 5)), ["eth0"])
    assert s.interfaces[0].rx_gbps == 0.0


def test_peer_rates_sum_connections_per_address_and_skip_loopback() -> None:
    before = (SocketBytes("198.18.0.2:5201", "198.18.0.1:1", 0, 1_000_000),
              SocketBytes("198.18.0.2:5202", "198.18.0.1:2", 0, 0))
    after = (SocketBytes("198.18.0.2:5201", "198.18.0.1:1", 0, 126_000_000),
             SocketBytes("198.18.0.2:5202", "198.18.0.1:2", 0, 125_000_000),
             SocketBytes("198.18.0.2:5203", "198.18.0.3:9", 12_500_000, 0),  # new socket
             SocketBytes("127.0.0.1:1", "127.0.0.1:2", 10**9, 10**9))
    s = compute(snap(0, counters(0, 0), sockets=before), snap(1, counters(0, 0),
                                                              sockets=after), ["eth0"])
    peers = {p.address: p for p in s.peers}
    assert set(peers) == {"198.18.0.1", "198.18.0.3"}
    assert peers["198.18.0.1"].rx_gbps == pytest.approx(2.0)
    assert peers["198.18.0.1"].connections == 2
    assert peers["198.18.0.3"].tx_gbps == pytest.approx(0.1)


def test_non_increasing_time_is_rejected() -> None:
    with pytest.raises(ValueError):
        compute(snap(1, counters(0, 0)), snap(1, counters(0, 0)))


def test_sampler_and_recorder_summary() -> None:
    snaps = [snap(float(t), counters(t * 125_000_000, 0)) for t in range(4)]
    got = list(samples(FakeSources(snaps), ["eth0"], 0.001, stop=_stop_after(3)))
    assert [round(s.interfaces[0].rx_gbps, 6) for s in got][:3] == [1.0, 1.0, 1.0]
    rec = Recorder(["eth0"], interval=0.001, sources=FakeSources(snaps))
    rec.start()
    deadline = time.monotonic() + 10
    while len(rec.samples) < 2 and time.monotonic() < deadline:
        time.sleep(0.001)
    summary = rec.stop()
    assert summary["samples"] >= 2
    assert summary["interfaces"]["eth0"]["rx_gbps_max"] == pytest.approx(1.0)


def _stop_after(n: int) -> threading.Event:
    class Counted(threading.Event):
        calls = 0

        def wait(self, timeout: float | None = None) -> bool:
            self.calls += 1
            return self.calls > n

    return Counted()
