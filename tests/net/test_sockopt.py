"""The one DF / path-MTU socket option pair and the kernel's TCP round trip, on real sockets."""

from __future__ import annotations

import socket
import struct

from ddpnet.net.sockopt import (
    TcpInfo,
    parse_tcp_info,
    path_mtu,
    set_dont_fragment,
    tcp_info,
    tcp_rtt_ms,
)


def test_stream_sockets_set_dont_fragment() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        set_dont_fragment(sock)
        assert sock.getsockopt(socket.IPPROTO_IP, 10) == 2  # IP_MTU_DISCOVER: IP_PMTUDISC_DO


def test_path_mtu_of_a_connected_datagram_socket_and_none_unconnected() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        assert path_mtu(sock) is None  # not connected: the kernel cannot say
        set_dont_fragment(sock)
        sock.connect(("127.0.0.1", 9))
        assert path_mtu(sock) in (65535, 65536)  # loopback: its MTU, as the kernel caps it


def test_tcp_rtt_of_a_connected_socket_and_none_before() -> None:
    with socket.socket() as listener, socket.socket() as sock:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        assert tcp_rtt_ms(sock) is None  # no handshake yet: nothing timed
        sock.connect(listener.getsockname())
        rtt = tcp_rtt_ms(sock)
        # loopback: the handshake in microseconds (a loaded host's softirq: a few ms)
        assert rtt is not None and 0 < rtt < 50, rtt


def test_parse_tcp_info_reads_mss_pmtu_rtt() -> None:
    raw = bytes(8) + struct.pack("3I", 0, 0, 1448) + bytes(60 - 20) + struct.pack("3I", 1500,
                                                                                  0, 250)
    assert parse_tcp_info(raw + bytes(32)) == TcpInfo(1448, 1500, 250)
    assert parse_tcp_info(b"short") is None


def test_tcp_info_of_a_datagram_socket_is_none() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        assert tcp_info(sock) is None  # no TCP_INFO there: the kernel refuses it
