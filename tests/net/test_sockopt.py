"""The one DF / path-MTU socket option pair, on real sockets."""

from __future__ import annotations

import socket

from ddpnet.net.sockopt import path_mtu, set_dont_fragment


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
