"""Socket options for probes: the one place that sets DF and reads the kernel's path MTU
(options Python's socket module does not name, ``<linux/in.h>``, ``<linux/in6.h>``), for the
check's UDP MTU probes and the watch's TCP stream probes, and that sizes a probe socket's
receive buffer, and that reads the kernel's round-trip time of a connected TCP socket.
Linux only; edge module."""

from __future__ import annotations

import contextlib
import socket
import struct
from dataclasses import dataclass

_IP_MTU_DISCOVER, _IP_MTU, _IPV6_MTU_DISCOVER, _IPV6_MTU, _PMTUDISC_DO = 10, 14, 23, 24, 2

#: family -> (level, MTU_DISCOVER option, MTU option)
_OPTIONS = {
    socket.AF_INET: (socket.IPPROTO_IP, _IP_MTU_DISCOVER, _IP_MTU),
    socket.AF_INET6: (socket.IPPROTO_IPV6, _IPV6_MTU_DISCOVER, _IPV6_MTU),
}


def set_dont_fragment(sock: socket.socket) -> None:
    """DF on every packet whatever ``ip_no_pmtu_disc`` says (IP_PMTUDISC_DO), so a path that
    cannot carry a size drops it instead of fragmenting it. OSError where it cannot be set."""
    level, discover, _ = _OPTIONS[sock.family]
    sock.setsockopt(level, discover, _PMTUDISC_DO)


def path_mtu(sock: socket.socket) -> int | None:
    """The kernel's path MTU for a connected socket, or None when it cannot say."""
    level, _, mtu = _OPTIONS[sock.family]
    try:
        return int(sock.getsockopt(level, mtu))
    except OSError:
        return None


def set_rcvbuf(sock: socket.socket, size: int) -> None:
    """A receive buffer of ``size`` bytes, past ``net.core.rmem_max`` where this process may
    (SO_RCVBUFFORCE, CAP_NET_ADMIN), else as much as rmem_max allows: a burst of small
    datagrams read late (a busy host) must not overflow the socket and count as lost on the
    wire. Best effort."""
    for opt in (getattr(socket, "SO_RCVBUFFORCE", None), socket.SO_RCVBUF):
        if opt is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, opt, size)
                return


#: ``struct tcp_info`` (``<linux/tcp.h>``) as read: 8 one-byte fields, then u32s
_TCP_INFO_LEN = 104


@dataclass(frozen=True)
class TcpInfo:
    """What the probes read of ``struct tcp_info``: the MSS, the path MTU and the smoothed
    round trip (microseconds)."""

    snd_mss: int
    pmtu: int
    rtt_us: int


def parse_tcp_info(raw: bytes) -> TcpInfo | None:
    """MSS, path MTU and RTT from ``struct tcp_info`` (linux/tcp.h: 8 bytes of u8 fields,
    then u32 rto, ato, snd_mss, ..., pmtu (14th), rcv_ssthresh, rtt); None when short."""
    if len(raw) < 72:
        return None
    snd_mss, = struct.unpack_from("I", raw, 16)
    pmtu, _, rtt = struct.unpack_from("III", raw, 60)
    return TcpInfo(snd_mss, pmtu, rtt)


def tcp_info(sock: socket.socket) -> TcpInfo | None:
    """The kernel's ``TCP_INFO`` of a TCP socket (:func:`parse_tcp_info`), or None where it
    cannot say."""
    try:
        return parse_tcp_info(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO,
                                              _TCP_INFO_LEN))
    except (OSError, AttributeError):
        return None


def tcp_rtt_ms(sock: socket.socket) -> float | None:
    """The kernel's round-trip time of a connected TCP socket in ms (``TCP_INFO``), or None
    where it cannot say. Read right after connect it is the SYN/SYN-ACK round trip timed in
    the kernel on both ends: a busy process, a slow thread start or a late reply does not
    count, as it would in a round trip timed here."""
    info = tcp_info(sock)
    return info.rtt_us / 1000 if info is not None and info.rtt_us else None
