"""The side channel's writers over real sockets (issue 56): a rank whose send buffer filled
resumes, never blocking its training thread; a verdict of a 1,024-rank job reaches every rank
whole through small buffers; a reader too slow is dropped and marked, never fed half a
message; a rank whose channel closed while its process answers is not named gone."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from ddpnet.net.ports import listen_socket
from ddpnet.watch import hub as hub_module
from ddpnet.watch.heartbeat import Beacon
from ddpnet.watch.hub import CLOSED, Hub, HubOptions
from ddpnet.watch.recorder import Recorder
from ddpnet.watch.state import CollectiveRecord, RankState
from ddpnet.watch.transport import Outbox
from ddpnet.watch.wire import Lines, encode
from tests.watch.test_hub import TOKEN, connected_pair, wait_for

# -- the outbox --------------------------------------------------------------------------------


def test_an_outbox_writes_whole_messages_in_order_and_a_newer_state_replaces_an_unsent_one(
        ) -> None:
    a, b = socket.socketpair()
    with a, b:
        a.setblocking(False)
        box = Outbox(limit=1 << 20)
        first = encode({"t": "call", "n": 1, "pad": "x" * 300_000})
        assert box.put(first)
        box.flush(a)  # the kernel takes part of it
        assert box.put(encode({"t": "state", "n": 2}), key="state")
        assert box.put(encode({"t": "state", "n": 3}), key="state")  # replaces n=2
        assert not box.put(encode({"t": "call", "pad": "y" * (1 << 20)}))  # over the limit
        assert box.dropped == 1
        lines, got = Lines(limit=1 << 21), []
        b.settimeout(5)
        while len(got) < 2:
            box.flush(a)
            got += lines.feed(b.recv(1 << 16))
        assert [m["n"] for m in got] == [1, 3] and not box.pending()


def test_an_outbox_that_finishes_no_message_for_its_deadline_is_late() -> None:
    box = Outbox(deadline=2.0)
    assert not box.late(100.0)  # empty: never late
    box.put(b"x\n", now=100.0)
    assert not box.late(101.0) and box.late(102.5)


# -- a rank's send buffer fills ----------------------------------------------------------------


class PausingHub:
    """A hub stand-in on real sockets: welcomes every connection, reads its lines (failing on
    any that is not whole JSON), and stops reading while ``paused`` is set."""

    def __init__(self) -> None:
        self.sock = listen_socket("127.0.0.1", 0)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.port = self.sock.getsockname()[1]
        self.paused = threading.Event()
        self.states: list[tuple[int, float]] = []  # (connection, state's published time)
        self.errors: list[str] = []
        self.connections = 0
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        while True:
            conn, _ = self.sock.accept()
            self.connections += 1
            threading.Thread(target=self.serve, args=(conn, self.connections),
                             daemon=True).start()

    def serve(self, conn: socket.socket, n: int) -> None:
        lines = Lines(limit=4 << 20)
        with conn:
            while True:
                if self.paused.is_set():
                    time.sleep(0.05)
                    continue
                data = conn.recv(1 << 16)
                if not data:
                    return
                try:
                    messages = lines.feed(data)
                except ValueError as exc:  # a cut message
                    self.errors.append(str(exc))
                    return
                for m in messages:
                    if m.get("t") == "hello":
                        conn.sendall(encode({"t": "welcome", "token": TOKEN}))
                    elif m.get("t") == "state":
                        self.states.append((n, float(m["state"]["published"])))


@pytest.mark.slow  # seconds of real sockets: outside make test-fast
def test_a_rank_whose_send_buffer_filled_resumes_and_never_blocks_its_training_thread(
        tmp_path: Path) -> None:
    """Before: one 2 s sendall timeout set ``send_failed`` for good, the rank sent nothing
    more, and its announce blocked the training thread for those 2 s."""
    fake = PausingHub()
    rec = Recorder()
    rec.use_fr = False
    # a fat state (~200 KB) fills the buffers in a few beats
    ident = RankState(rank=1, world_size=2, host="h1", extra={"pad": "p" * 200_000})
    b = Beacon(rec, ident, tmp_path, period=0.1, exit_now=lambda code: None)
    b.connect("127.0.0.1", fake.port, token=TOKEN)
    try:
        assert wait_for(lambda: fake.states)
        fake.paused.set()
        time.sleep(1.0)  # the buffers fill
        slowest = 0.0
        for seq in range(20):  # the training thread announces its calls meanwhile
            start = time.monotonic()
            b.announce(CollectiveRecord(seq=seq, op="all_reduce", started=time.time()))
            slowest = max(slowest, time.monotonic() - start)
            time.sleep(0.25)
        assert slowest < 0.5, f"an announce blocked the training thread {slowest:.1f} s"
        resumed = time.time()
        fake.paused.clear()
        assert wait_for(lambda: any(at > resumed for _n, at in fake.states), 15), \
            "no state of this rank arrived after the hub read again"
        assert fake.errors == []  # no connection carried half a message then another
    finally:
        b.close()


# -- the hub's verdict ---------------------------------------------------------------------------


def fat_state(rank: int, world: int) -> RankState:
    records = tuple(CollectiveRecord(seq=s, op="all_reduce", dtype="float32", shape=(1024, 64),
                                     started=1.0, ended=2.0, site=f"train.py:{s} in step")
                    for s in range(64))
    return RankState(rank=rank, world_size=world, host=f"node{rank // 8}", address="10.0.0.1",
                     step=7, phase="backward", recent=records, published=time.time())


def read_verdict(rank: int, c: socket.socket, got: dict[int, dict[str, object]]) -> None:
    """A slow reader: 4 KB at a time until the verdict (a cut message raises ValueError)."""
    lines = Lines(limit=4 << 20)
    c.settimeout(30.0)
    while data := c.recv(4096):
        for m in lines.feed(data):
            if m.get("t") == "verdict":
                got[rank] = m
                return
        time.sleep(0.001)


@pytest.mark.slow  # seconds of real sockets: outside make test-fast
def test_a_1024_rank_verdict_reaches_every_rank_whole_through_small_buffers(
        tmp_path: Path) -> None:
    """Before: one non-blocking send whose count was ignored: each rank got the first few KB
    of the verdict, a cut line."""
    world, gone = 1024, range(200, 264)  # 64 ranks gone at once
    sock = listen_socket("127.0.0.1", 0)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # the accepted inherit it
    sock.setblocking(False)
    port = sock.getsockname()[1]
    hub = Hub(HubOptions("127.0.0.1", port, world, 30, "exit", str(tmp_path), TOKEN), sock)
    hub.states = {r: fat_state(r, world) for r in range(world)}
    hub.left = {r: CLOSED for r in gone}
    ranks = range(16)
    clients = []
    for r in ranks:
        c = socket.socket()
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.connect(("127.0.0.1", port))
        c.sendall(encode({"t": "hello", "rank": r, "token": TOKEN}))
        clients.append(c)
    got: dict[int, dict[str, object]] = {}
    readers = [threading.Thread(target=read_verdict, args=(r, c, got), daemon=True)
               for r, c in zip(ranks, clients, strict=True)]
    for t in readers:
        t.start()
    thread = threading.Thread(target=hub.serve, daemon=True)
    thread.start()
    for t in readers:
        t.join(60)
    for c in clients:
        c.close()
    thread.join(30)
    assert sorted(got) == list(ranks)
    size = len(encode(got[0]))
    context = got[0]["context"]
    assert isinstance(context, dict) and size > 500_000
    for m in got.values():
        assert m["context"] == context  # whole, the same bytes for every rank
    assert {int(r) for r in context["states"]} >= set(gone)  # the 64 gone, and more
    assert hub.slow_readers == set()


def test_a_reader_too_slow_for_the_deadline_is_dropped_and_marked_not_fed_half_a_message(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hub_module, "WRITE_DEADLINE_S", 1.0)
    sock = listen_socket("127.0.0.1", 0)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    sock.setblocking(False)
    port = sock.getsockname()[1]
    hub = Hub(HubOptions("127.0.0.1", port, 2, 30, "exit", str(tmp_path), TOKEN), sock)
    hub.states = {0: RankState(rank=0, world_size=2, extra={"pad": "p" * 600_000})}
    thread = threading.Thread(target=hub.serve, daemon=True)
    thread.start()
    c = socket.socket()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    c.connect(("127.0.0.1", port))
    with c:
        c.sendall(encode({"t": "hello", "rank": 1, "token": TOKEN}))
        c.sendall(encode({"t": "state", "rank": 1,
                          "state": RankState(rank=1, world_size=2).to_dict()}))
        assert wait_for(lambda: 1 in hub.states)
        c.sendall(encode({"t": "snapshot"}))  # a big answer this client never reads
        assert wait_for(lambda: hub.slow_readers == {1}, 15)
        c.settimeout(10)
        data = b""
        while chunk := c.recv(1 << 16):
            data += chunk
        # what arrived is whole messages, then the rest of the one begun, cut by the close
        *whole, _tail = data.split(b"\n")
        assert all(json.loads(line) for line in whole)


# -- a channel that closes while the rank lives ------------------------------------------------


@pytest.mark.slow  # seconds of real sockets: outside make test-fast
def test_a_rank_whose_channel_closed_while_its_process_answers_connects_anew_and_is_not_gone(
        tmp_path: Path) -> None:
    """Before: a closed channel was a rank gone: named after 2 s, every rank told to exit."""
    exits: list[tuple[int, int]] = []
    hub, _port, _thread, b0, b1 = connected_pair(tmp_path, exits, ports=True)
    old = b1.sock
    assert old is not None
    old.close()  # as a wedged connection dropped by the rank
    assert wait_for(lambda: b1.reconnects >= 1 and 1 in hub.channels)
    time.sleep(3.0)  # past the 2 s a closed channel waited before a verdict
    assert exits == [] and 1 not in hub.left and not hub.watchdog.fired
    b0.close()
    b1.close()


@pytest.mark.slow  # seconds of real sockets: outside make test-fast
def test_a_rank_whose_channel_closed_and_whose_process_is_gone_is_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    exits: list[tuple[int, int]] = []
    _hub, _port, thread, _b0, b1 = connected_pair(tmp_path, exits, ports=True)
    sock = b1.sock
    assert sock is not None
    b1.stopped.set()
    for listener in b1.listeners:  # the process is gone: nothing answers at its ports
        listener.close()
    sock.close()
    assert wait_for(lambda: exits == [(0, 4)])
    thread.join(10)
    assert "rank 1 (h1) is gone" in capsys.readouterr().err


@pytest.mark.slow  # seconds of real sockets: outside make test-fast
def test_a_rank_whose_connection_has_an_fd_above_1023_keeps_it(tmp_path: Path) -> None:
    """A rank with many files open (NCCL, a data loader) gets a socket above 1023, which
    select() refuses: its heartbeat took that for the hub gone and dropped the connection."""
    fds = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        exits: list[tuple[int, int]] = []
        hub, _port, _thread, b0, b1 = connected_pair(tmp_path, exits)
        assert b1.sock is not None and b1.sock.fileno() > 1023
        heard = hub.heard[1]
        time.sleep(2.0)
        assert hub.heard[1] > heard and b1.reconnects == 0 and not hub.left and exits == []
        b0.close()
        b1.close()
    finally:
        for fd in fds:
            os.close(fd)
