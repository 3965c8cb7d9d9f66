"""Parsers of the kernel's and ss's real formats."""

from __future__ import annotations

from pathlib import Path

from ddpnet.monitor.sources import (
    parse_netdev,
    parse_snmp_tcp,
    parse_ss,
    read_link_mbps,
    strip_port,
)

NETDEV = """Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:   12345      10    0    0    0     0          0         0    12345      10    0    0    0     0       0          0
  eth0: 1000000000 800000    2    3    0     0          0         5 500000000  400000    1    4    0     0       0          0
"""

SNMP = """Ip: Forwarding DefaultTTL
Ip: 1 64
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors
Tcp: 1 200 120000 -1 84 4 40 0 16 6434 4381 17 0 70 0
Udp: InDatagrams NoPorts
Udp: 1 2
"""

SS = """ESTAB 0      0      198.18.0.2:5201 198.18.0.1:43212
\t cubic wscale:7,7 rto:204 rtt:0.05/0.025 mss:1448 bytes_sent:2000 bytes_acked:1500 bytes_received:9000 segs_out:10 bbr:(bw:1bps,mrtt:0.1)
ESTAB 0      0      [::ffff:198.18.0.2]:29500 [::ffff:198.18.0.3]:40000
\t cubic rto:204 bytes_acked:7 bytes_received:8
"""


def test_parse_netdev() -> None:
    got = parse_netdev(NETDEV)
    assert set(got) == {"lo", "eth0"}
    eth = got["eth0"]
    assert (eth.rx_bytes, eth.rx_packets, eth.rx_errors, eth.rx_drops) == (1000000000, 800000,
                                                                           2, 3)
    assert (eth.tx_bytes, eth.tx_packets, eth.tx_errors, eth.tx_drops) == (500000000, 400000,
                                                                           1, 4)


def test_parse_snmp() -> None:
    assert parse_snmp_tcp(SNMP) == (17, 4381)
    assert parse_snmp_tcp("") == (0, 0)


def test_parse_ss_uses_acked_bytes_and_handles_v4_mapped() -> None:
    socks = parse_ss(SS)
    assert len(socks) == 2
    assert (socks[0].sent, socks[0].received) == (1500, 9000)
    assert strip_port(socks[0].remote) == "198.18.0.1"
    assert strip_port(socks[1].remote) == "198.18.0.3"
    assert strip_port("[fd00::1]:80") == "fd00::1"


def test_link_speed_from_sysfs_fixture(tmp_path: Path) -> None:
    (tmp_path / "class/net/eth0").mkdir(parents=True)
    (tmp_path / "class/net/eth0/speed").write_text("25000\n")
    (tmp_path / "class/net/veth1").mkdir(parents=True)
    (tmp_path / "class/net/veth1/speed").write_text("-1\n")
    assert read_link_mbps("eth0", tmp_path) == 25000
    assert read_link_mbps("veth1", tmp_path) is None
    assert read_link_mbps("lo", tmp_path) is None
