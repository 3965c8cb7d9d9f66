"""The kernel's routing lookup over rtnetlink (``RTM_GETROUTE``): what ``ip route get DST
[from SRC] [iif IFACE]`` asks, without a process.

Why not ``ip``: every rank of ``check`` asks two lookups per subnet and ``init()``/``env``
ask one; each ``ip`` is a fork and an exec of a dynamically linked program (~4-6 CPU-ms
with its loader), and containers often lack iproute2, where the answer was no evidence at
all. Why not pyroute2: it takes 0.37 s to import and 0.8 ms a lookup, for one request and
one answer whose layout (``linux/rtnetlink.h``) has been stable since Linux 2.2.

``encode_request`` and ``decode_reply`` are pure; ``get_route`` is the edge (one netlink
socket per call, bounded by a timeout, in the caller's network namespace as ``ip`` would be).
The framing every netlink family shares (``attr``, ``message``, ``messages``, ``attrs``) is
here too: the lab's delay line speaks nfnetlink_queue with it.
"""

from __future__ import annotations

import errno as errnos
import ipaddress
import os
import socket
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass

NETLINK_ROUTE = 0
RTM_NEWROUTE, RTM_GETROUTE, NLMSG_ERROR = 24, 26, 2
NLM_F_REQUEST = 1
#: answer with the table the route came from (else the kernel says "main"), as ``ip`` asks
RTM_F_LOOKUP_TABLE = 0x1000
RTA_DST, RTA_SRC, RTA_IIF, RTA_OIF, RTA_GATEWAY, RTA_PREFSRC, RTA_TABLE, RTA_VIA = \
    1, 2, 3, 4, 5, 7, 15, 18
#: route types (``rtm_type``) as ``ip`` names them
TYPES = {1: "unicast", 2: "local", 3: "broadcast", 4: "anycast", 5: "multicast",
         6: "blackhole", 7: "unreachable", 8: "prohibit", 9: "throw", 10: "nat"}
#: the kernel's own tables, which ``ip route get`` does not name
MAIN_TABLES = (254, 255)

_HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id
_RTMSG = struct.Struct("=BBBBBBBBI")  # family, dst_len, src_len, tos, table, proto, scope,
#                                       type, flags
_ATTR = struct.Struct("=HH")  # rtattr: length, type


@dataclass(frozen=True)
class Answer:
    """The kernel's answer to one lookup: a route (``error`` 0) or the errno it refused the
    lookup with (``EINVAL``/``EXDEV`` with ``iif``: the reverse-path filter;
    ``ENETUNREACH``: no route)."""

    error: int = 0
    type: str = "unicast"
    table: int = 0
    oif: int | None = None
    gateway: str | None = None
    prefsrc: str | None = None

    @property
    def reason(self) -> str:
        """The refusal as ``ip`` prints it ("Network is unreachable"), empty for a route."""
        return os.strerror(self.error) if self.error else ""


#: an attribute's type without its flags (NLA_F_NESTED, NLA_F_NET_BYTEORDER)
NLA_TYPE_MASK = 0x3FFF


def attr(kind: int, data: bytes) -> bytes:
    """One attribute (rtattr/nlattr), padded to 4 bytes (pure)."""
    size = _ATTR.size + len(data)
    return _ATTR.pack(size, kind) + data + b"\0" * (-size % 4)


def message(kind: int, flags: int, seq: int, payload: bytes) -> bytes:
    """One netlink message: its header (to the kernel: port id 0) and ``payload`` (pure)."""
    return _HEADER.pack(_HEADER.size + len(payload), kind, flags, seq, 0) + payload


def messages(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(type, sequence, body) of each whole message in what a netlink socket read, up to the
    first truncated one (pure)."""
    at = 0
    while at + _HEADER.size <= len(data):
        size, kind, _, seq, _ = _HEADER.unpack_from(data, at)
        if size < _HEADER.size or at + size > len(data):
            return
        yield kind, seq, data[at + _HEADER.size:at + size]
        at += size + (-size % 4)


def error_code(body: bytes) -> int | None:
    """The errno an ``NLMSG_ERROR`` body carries (0: an acknowledgement), None if cut short."""
    return -struct.unpack_from("=i", body)[0] if len(body) >= 4 else None


def encode_request(seq: int, dst: str, src: str | None = None,
                   iif_index: int | None = None) -> bytes:
    """The ``RTM_GETROUTE`` message for ``dst`` (and ``src``, and the arriving interface's
    index) (pure). Addresses must be of one family."""
    target = ipaddress.ip_address(dst)
    family = socket.AF_INET6 if target.version == 6 else socket.AF_INET
    bits = target.max_prefixlen
    body = attr(RTA_DST, target.packed)
    if src is not None:
        source = ipaddress.ip_address(src)
        if source.version != target.version:
            raise ValueError(f"{src} and {dst} are of different address families")
        body += attr(RTA_SRC, source.packed)
    if iif_index is not None:
        body += attr(RTA_IIF, struct.pack("=I", iif_index))
    rtmsg = _RTMSG.pack(family, bits, bits if src is not None else 0, 0, 0, 0, 0, 0,
                        RTM_F_LOOKUP_TABLE)
    return message(RTM_GETROUTE, NLM_F_REQUEST, seq, rtmsg + body)


def _address(data: bytes) -> str | None:
    try:
        return str(ipaddress.ip_address(data))
    except ValueError:
        return None


def attrs(data: bytes) -> dict[int, bytes]:
    """Each attribute's data by its type (flags masked off; the first of a type), up to the
    first truncated one (pure)."""
    out: dict[int, bytes] = {}
    at = 0
    while at + _ATTR.size <= len(data):
        size, kind = _ATTR.unpack_from(data, at)
        if size < _ATTR.size or at + size > len(data):
            break
        out.setdefault(kind & NLA_TYPE_MASK, data[at + _ATTR.size:at + size])
        at += size + (-size % 4)
    return out


def _route(body: bytes) -> Answer:
    _, _, _, _, table, _, _, rtype, _ = _RTMSG.unpack_from(body)
    got = attrs(body[_RTMSG.size:])
    if RTA_TABLE in got and len(got[RTA_TABLE]) >= 4:
        table = struct.unpack_from("=I", got[RTA_TABLE])[0]
    gateway = _address(got[RTA_GATEWAY]) if RTA_GATEWAY in got else None
    if gateway is None and len(got.get(RTA_VIA, b"")) > 2:  # an IPv6 route via an IPv4
        gateway = _address(got[RTA_VIA][2:])
    return Answer(
        type=TYPES.get(rtype, str(rtype)), table=table,
        oif=struct.unpack_from("=I", got[RTA_OIF])[0] if len(got.get(RTA_OIF, b"")) >= 4
        else None,
        gateway=gateway,
        prefsrc=_address(got[RTA_PREFSRC]) if RTA_PREFSRC in got else None)


def decode_reply(data: bytes, seq: int) -> Answer | None:
    """The answer to request ``seq`` in the bytes the kernel sent, or None when they hold
    none (another sequence, a truncated message) (pure)."""
    for kind, got_seq, body in messages(data):
        if got_seq == seq and kind == NLMSG_ERROR and (code := error_code(body)) is not None:
            return Answer(error=code) if code else None  # 0: an ack, not an answer
        if got_seq == seq and kind == RTM_NEWROUTE and len(body) >= _RTMSG.size:
            return _route(body)
    return None


def get_route(dst: str, src: str | None = None, iif: str | None = None,
              timeout: float = 2.0) -> Answer | None:
    """The kernel's answer for ``dst`` (edge, bounded by ``timeout``); None where netlink
    cannot be asked (no such socket here, or no answer in time): the caller falls back to
    iproute2. An unknown ``iif`` is ``ENODEV``, as ``ip`` refuses it."""
    try:
        index = socket.if_nametoindex(iif) if iif is not None else None
    except OSError:
        return Answer(error=errnos.ENODEV)
    seq = int(time.monotonic_ns() & 0x7FFFFFFF) or 1
    try:
        request = encode_request(seq, dst, src, index)
    except ValueError:  # a name, or two families: iproute2 says what is wrong with it
        return None
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE) as sock:
            sock.settimeout(timeout)
            sock.bind((0, 0))
            sock.sendto(request, (0, 0))
            deadline = time.monotonic() + timeout
            while (left := deadline - time.monotonic()) > 0:
                sock.settimeout(left)
                answer = decode_reply(sock.recv(65536), seq)
                if answer is not None:
                    return answer
    except (OSError, AttributeError):  # no AF_NETLINK (not Linux), refused, timed out
        return None
    return None


def table_name(table: int, files: tuple[str, ...] = (
        "/etc/iproute2/rt_tables", "/usr/share/iproute2/rt_tables",
        "/usr/lib/iproute2/rt_tables")) -> str:
    """A routing table's name as ``ip`` shows it: the kernel's own tables by name, others
    from ``rt_tables`` (and ``rt_tables.d/*.conf``) where named there, else the number."""
    own = {253: "default", 254: "main", 255: "local"}
    if table in own:
        return own[table]
    from pathlib import Path

    for path in files:
        base = Path(path)
        for name in (base, *sorted(base.parent.glob("rt_tables.d/*.conf"))):
            try:
                text = name.read_text()
            except (OSError, UnicodeDecodeError):
                continue
            found = parse_rt_tables(text).get(table)
            if found:
                return found
    return str(table)


def parse_rt_tables(text: str) -> dict[int, str]:
    """``number name`` lines of an ``rt_tables`` file (pure)."""
    out: dict[int, str] = {}
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) >= 2 and fields[0].isdigit():
            out.setdefault(int(fields[0]), fields[1])
    return out
