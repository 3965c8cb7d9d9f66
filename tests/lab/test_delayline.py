"""The nfnetlink_queue messages the delay line speaks, byte for byte."""

from __future__ import annotations

import struct

from ddpnet.lab import delayline as d
from ddpnet.net import netlink


def test_verdict_batch_message() -> None:
    msg = d.verdict_batch(0, 42)
    length, mtype, flags = struct.unpack_from("=IHH", msg)
    assert length == len(msg) == 16 + 4 + 12
    assert mtype == (3 << 8) | 3 and flags & 1
    assert struct.unpack_from("=HH", msg, 20) == (12, 2)
    assert struct.unpack_from("!II", msg, 24) == (1, 42)    # NF_ACCEPT up to id 42


def test_bind_messages_ask_for_metadata_only_and_fail_open() -> None:
    bind, params = d.bind_messages(3, maxlen=500)
    assert struct.unpack_from("!H", bind, 18)[0] == 3        # queue number, big endian
    assert bind[20 + 4] == d.NFQNL_CFG_CMD_BIND
    assert struct.pack("!IB", 0, d.NFQNL_COPY_META) in params
    assert struct.pack("!I", 500) in params
    assert struct.pack("!I", d.NFQA_CFG_F_FAIL_OPEN | d.NFQA_CFG_F_GSO) in params


def _packet(pid: int) -> bytes:
    attr = struct.pack("=HH", 11, d.NFQA_PACKET_HDR) + struct.pack("!IHB", pid, 0x0800, 0) + b"\0"
    body = struct.pack("=BBH", 2, 0, 0) + attr
    return struct.pack("=IHHII", 16 + len(body), (3 << 8) | 0, 0, 0, 0) + body


def test_packet_ids_and_errors_are_parsed() -> None:
    err = struct.pack("=IHHII", 36, netlink.NLMSG_ERROR, 0, 0, 0) + struct.pack("=i", -1) + b"\0" * 16
    ids, errors = d.packet_ids(_packet(7) + _packet(8) + err)
    assert ids == [7, 8] and errors == [1]


def test_jitter_varies_the_delay_but_never_reorders() -> None:
    """A batch's release: the delay +- the jitter, never before the batch ahead of it (a
    batch verdict accepts every id up to one: arrival order is the order out)."""
    assert d.due_at(10.0, 0.02, 0.0, 0.0, 0.7) == 10.02
    assert abs(d.due_at(10.0, 0.02, 0.01, 0.0, 1.0) - 10.03) < 1e-9
    assert abs(d.due_at(10.0, 0.02, 0.01, 0.0, -1.0) - 10.01) < 1e-9
    assert d.due_at(10.0, 0.02, 0.01, 10.05, -1.0) == 10.05  # behind a later release
    assert d.due_at(10.0, 0.005, 0.01, 0.0, -1.0) == 10.0  # never a negative delay
