"""rtnetlink route lookups (``net.netlink``): the message layout both ways (pure), and the
real kernel's answers equal to what ``ip -j route get`` reads for the same questions, on
this host and in a lab node with the routes that make the interesting answers (a gateway,
a policy table, unreachable and blackhole routes, the reverse-path filter)."""

from __future__ import annotations

import json
import socket
import struct
import sys
from collections.abc import Iterator

import pytest

from ddpnet.lab import Lab
from ddpnet.net import netlink
from ddpnet.net.netlink import (
    NLMSG_ERROR,
    RTA_DST,
    RTA_GATEWAY,
    RTA_IIF,
    RTA_OIF,
    RTA_PREFSRC,
    RTA_SRC,
    RTA_TABLE,
    RTM_GETROUTE,
    RTM_NEWROUTE,
    Answer,
    decode_reply,
    encode_request,
    parse_rt_tables,
)
from ddpnet.net.routes import lookup, lookup_of, parse_lookup, route_to
from ddpnet.subproc import run_command
from tests.lab_util import fresh_lab, requires_netns


def _attrs(data: bytes) -> dict[int, bytes]:
    return netlink.attrs(data)


def test_request_layout() -> None:
    msg = encode_request(7, "198.18.0.5", "198.18.0.1", iif_index=3)
    size, kind, flags, seq, pid = struct.unpack_from("=IHHII", msg)
    assert (size, kind, flags, seq, pid) == (len(msg), RTM_GETROUTE, 1, 7, 0)
    family, dst_len, src_len = msg[16], msg[17], msg[18]
    assert (family, dst_len, src_len) == (socket.AF_INET, 32, 32)
    # the table the route came from, not "main" (a policy rule's table is evidence)
    assert struct.unpack_from("=I", msg, 24)[0] & netlink.RTM_F_LOOKUP_TABLE
    got = _attrs(msg[16 + 12:])
    assert got[RTA_DST] == socket.inet_aton("198.18.0.5")
    assert got[RTA_SRC] == socket.inet_aton("198.18.0.1")
    assert struct.unpack("=I", got[RTA_IIF]) == (3,)


def test_request_ipv6_without_source() -> None:
    msg = encode_request(1, "fd00::5")
    assert (msg[16], msg[17], msg[18]) == (socket.AF_INET6, 128, 0)
    assert set(_attrs(msg[28:])) == {RTA_DST}


def test_request_refuses_mixed_families() -> None:
    with pytest.raises(ValueError, match="different address families"):
        encode_request(1, "fd00::5", "198.18.0.1")


def _attr(kind: int, data: bytes) -> bytes:
    return struct.pack("=HH", 4 + len(data), kind) + data + b"\0" * (-(4 + len(data)) % 4)


def _message(kind: int, seq: int, body: bytes) -> bytes:
    return struct.pack("=IHHII", 16 + len(body), kind, 0, seq, 0) + body


def _route(seq: int, rtype: int = 1, table: int = 254, **attrs: bytes) -> bytes:
    rtmsg = struct.pack("=BBBBBBBBI", socket.AF_INET, 32, 0, 0, min(table, 252), 0, 0,
                        rtype, 0)
    names = {"oif": RTA_OIF, "gateway": RTA_GATEWAY, "prefsrc": RTA_PREFSRC}
    body = rtmsg + _attr(RTA_TABLE, struct.pack("=I", table)) + b"".join(
        _attr(names[k], v) for k, v in attrs.items())
    return _message(RTM_NEWROUTE, seq, body)


def test_decode_route_with_gateway() -> None:
    data = _route(5, oif=struct.pack("=I", 2), gateway=socket.inet_aton("198.18.0.254"),
                  prefsrc=socket.inet_aton("198.18.0.3"))
    assert decode_reply(data, 5) == Answer(type="unicast", table=254, oif=2,
                                           gateway="198.18.0.254", prefsrc="198.18.0.3")


def test_decode_table_above_255_from_its_attribute() -> None:
    assert decode_reply(_route(5, rtype=2, table=1000), 5) == Answer(type="local", table=1000)


def test_decode_error_and_other_sequences() -> None:
    error = _message(NLMSG_ERROR, 9, struct.pack("=i", -101) + b"\0" * 16)
    answer = decode_reply(_route(8) + error, 9)  # the first message is not ours
    assert answer == Answer(error=101) and answer.reason == "Network is unreachable"
    assert decode_reply(_route(8), 9) is None
    assert decode_reply(_message(NLMSG_ERROR, 9, struct.pack("=i", 0)), 9) is None  # an ack
    assert decode_reply(_route(5)[:20], 5) is None  # truncated


def test_parse_rt_tables() -> None:
    text = "#\n# reserved values\n255\tlocal\n254 main # the main one\n100 gpu\nbad line\n"
    assert parse_rt_tables(text) == {255: "local", 254: "main", 100: "gpu"}


def test_table_name_falls_back_to_the_number(tmp_path: pytest.TempPathFactory) -> None:
    path = tmp_path / "rt_tables"  # type: ignore[operator]
    path.write_text("100 gpu\n")
    assert netlink.table_name(100, (str(path),)) == "gpu"
    assert netlink.table_name(101, (str(path),)) == "101"
    assert netlink.table_name(254, ()) == "main"


def _oracle(dst: str, src: str, iif: str | None = None) -> dict[str, object]:
    """What ``ip -j route get`` answers, read as before netlink."""
    tail = ["from", src, *(["iif", iif] if iif else [])]
    proc = run_command(["ip", "-j", "route", "get", dst, *tail], 5.0)
    assert proc is not None
    return parse_lookup("ip route get " + " ".join([dst, *tail]), proc.returncode,
                        proc.stdout, proc.stderr, dst).to_dict()


def test_real_kernel_agrees_with_ip_on_this_host() -> None:
    answer = netlink.get_route("127.0.0.1", "127.0.0.1")
    assert answer is not None and answer.type == "local"
    ours = lookup_of("ip route get 127.0.0.1 from 127.0.0.1", answer, "127.0.0.1")
    assert ours.to_dict() == _oracle("127.0.0.1", "127.0.0.1")
    route = route_to("127.0.0.1")
    assert route is not None and route.iface == "lo" and route.local


def test_questions_netlink_cannot_encode_are_left_to_iproute2() -> None:
    assert netlink.get_route("198.18.0.1", "fd00::1") is None  # two families
    assert netlink.get_route("not-an-address") is None


def test_unknown_interface_is_said_as_ip_says_it() -> None:
    got = lookup("127.0.0.1", "127.0.0.1", "ddpnet-none0")
    assert got is not None and got.error == 'Cannot find device "ddpnet-none0"'


#: run inside a lab node: each question's answer from netlink (``lookup``) and from ip
COMPARE = """
import json, sys
from ddpnet.net.routes import lookup, parse_lookup, route_to
from ddpnet.subproc import run_command
out = []
for dst, src, iif in json.loads(sys.argv[1]):
    tail = ["from", src, *(["iif", iif] if iif else [])]
    proc = run_command(["ip", "-j", "route", "get", dst, *tail], 5.0)
    ip = parse_lookup("ip route get " + " ".join([dst, *tail]), proc.returncode, proc.stdout,
                      proc.stderr, dst)
    ours = lookup(dst, src, iif)
    route = route_to(dst)
    out.append([ours.to_dict(), ip.to_dict(), ip.route.src if ip.route else None,
                route.src if route else None])
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with fresh_lab("nlk", nodes=2) as lab:
        a, b = lab.nodes[0].address, lab.nodes[1].address
        for argv in (["ip", "route", "add", "198.18.200.0/24", "via", b],
                     ["ip", "route", "add", "unreachable", "198.18.201.0/24"],
                     ["ip", "route", "add", "blackhole", "198.18.202.0/24"],
                     ["ip", "route", "add", "prohibit", "198.18.203.0/24"],
                     ["ip", "rule", "add", "from", a, "to", "198.18.204.0/24",
                      "lookup", "100"],
                     ["ip", "route", "add", "198.18.204.0/24", "via", b, "table", "100"],
                     ["ip", "link", "add", "nlk-d0", "type", "veth", "peer", "name",
                      "nlk-d1"],
                     ["ip", "link", "set", "nlk-d0", "up"],
                     ["ip", "route", "add", "198.18.205.0/24", "dev", "nlk-d0"],
                     ["sysctl", "-qw", "net.ipv4.conf.all.rp_filter=1"]):
            assert lab.exec(0, argv).returncode == 0, argv
        yield lab


@requires_netns
@pytest.mark.root
def test_real_kernel_agrees_with_ip_in_a_lab_node(lab: Lab) -> None:
    a, b = lab.nodes[0].address, lab.nodes[1].address
    iface = lab.nodes[0].ifname
    questions = [
        [b, a, None],                    # on link
        [a, b, iface],                   # the way in: accepted
        ["198.18.200.9", a, None],       # through a gateway
        ["198.18.201.9", a, None],       # unreachable
        ["198.18.202.9", a, None],       # blackhole
        ["198.18.203.9", a, None],       # prohibit
        ["198.18.204.9", a, None],       # a policy rule's table
        [a, "198.18.205.9", iface],      # arrives on the lab's NIC, the way back is nlk-d0: rp_filter
        [a, a, None],                    # this node's own address
    ]
    proc = lab.exec(0, [sys.executable, "-c", COMPARE, json.dumps(questions)])
    assert proc.returncode == 0, proc.stderr
    answers = json.loads(proc.stdout)
    for (dst, src, iif), (ours, ip, ip_src, our_src) in zip(questions, answers, strict=True):
        assert ours == ip, (dst, src, iif)
        if iif is None:
            assert our_src == (ip_src or our_src), (dst, src)
    by = {tuple(q): a[0] for q, a in zip(questions, answers, strict=True)}
    assert by[("198.18.204.9", a, None)]["table"] == "100"
    assert by[("198.18.200.9", a, None)]["via"] == b
    assert not by[(a, "198.18.205.9", iface)]["ok"]
    assert by[(b, a, None)]["ok"]
