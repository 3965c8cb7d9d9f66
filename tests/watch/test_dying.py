"""watch.dying: a rank that dies of a peer's failure (gloo's "Connection closed by peer" raised in the
user's code) waits for the watch's verdict and exits with its code and named cause; a rank's
own bug does not wait (real hub, real beacons on loopback)."""

from __future__ import annotations

import io
import socket
import sys
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
import torch.distributed as dist

from ddpnet.net.ports import listen_socket
from ddpnet.watch.dying import Ending, peer_failure
from ddpnet.watch.threshold import learn, learned
from ddpnet.watch.wire import Lines, encode
from tests.watch.test_hub import TOKEN, beacon, connected_pair, wait_for

#: the verdict a dying rank would wait for: judging itself at once takes a fraction of it
VERDICT_WAIT = 30.0


@pytest.mark.parametrize("kind,text,expected", [
    (dist.DistBackendError, "[pair.cc:534] Connection closed by peer [127.0.0.1]:4242", True),
    (dist.DistNetworkError, "failed to connect", True),
    (dist.DistStoreError, "wait timeout", True),
    (RuntimeError, "[../gloo/transport/tcp/pair.cc:598] Connection reset by peer", True),
    (RuntimeError, "Timed out waiting 1800000ms for recv operation to complete", True),
    (RuntimeError, "NCCL communicator was aborted on rank 3", True),
    (RuntimeError, "mat1 and mat2 shapes cannot be multiplied (8x16 and 4x4)", False),
    (ValueError, "Connection closed by peer", False),  # the user's own words, not c10d's
    (KeyError, "x", False),
])
def test_peer_failures_are_told_from_a_ranks_own_errors(kind: type[BaseException], text: str,
                                                       expected: bool) -> None:
    assert peer_failure(kind, text) is expected


def _ending(tmp_path: Path, wait: float) -> tuple[Ending, list[tuple[int, int]],
                                                   list[BaseException]]:
    exits: list[tuple[int, int]] = []
    _hub, _port, _thread, b0, b1 = connected_pair(tmp_path, exits)
    printed: list[BaseException] = []
    ending = Ending(b0, verdict_wait=wait)

    def hook(_kind: type[BaseException], exc: BaseException, _tb: TracebackType | None) -> None:
        printed.append(exc)

    ending.previous_hook = hook
    # rank 1 is killed: its side channel closes without a goodbye
    sock = b1.sock
    b1.stopped.set()
    assert sock is not None
    sock.close()
    return ending, exits, printed


def test_a_rank_dying_of_a_peers_failure_exits_with_the_verdict(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ending, exits, printed = _ending(tmp_path, wait=10)
    exc = dist.DistBackendError("[pair.cc:534] Connection closed by peer [127.0.0.1]:4242")
    start = time.monotonic()
    ending.excepthook(type(exc), exc, None)
    assert exits == [(0, 4)] and time.monotonic() - start < 8
    assert printed == [exc]  # the user's traceback still comes first
    err = capsys.readouterr().err
    assert "waiting up to 10 s for the watch to name the cause" in err
    assert "ddpnet: watch: rank 0 exits (4): rank-gone: rank 1 (h1) is gone" in err


def test_under_torchs_excepthook_the_traceback_and_verdict_are_printed_before_the_exit(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``init_process_group`` wraps the excepthook it finds (ours, from ``ddpnet.init``) in
    one that swaps sys.stderr for a StringIO while ours runs, and prints it once ours
    returns (torch/distributed/distributed_c10d.py, ``_distributed_excepthook``). The
    verdict exits first: in a lab run the stopped rank's log had neither line, exit 4."""
    ending, exits, _printed = _ending(tmp_path, wait=10)
    ending.previous_hook = lambda kind, exc, tb: sys.stderr.write(f"Traceback: {exc}\n")
    seen_at_exit: list[str] = []
    record = ending.beacon.exit_now

    def exit_now(code: int) -> None:  # what the process had printed when os._exit came
        seen_at_exit.append(capsys.readouterr().err)
        record(code)

    ending.beacon.exit_now = exit_now

    def torchs_hook(*args: Any) -> None:
        old_stderr = sys.stderr
        sys.stderr = buf = io.StringIO()
        try:
            ending.excepthook(*args)
        finally:
            sys.stderr = old_stderr
        sys.stderr.write(buf.getvalue())

    exc = dist.DistBackendError("[pair.cc:534] Connection closed by peer [127.0.0.1]:4242")
    torchs_hook(type(exc), exc, None)
    assert exits == [(0, 4)] and len(seen_at_exit) == 1
    assert "Traceback: [pair.cc:534] Connection closed by peer" in seen_at_exit[0]
    assert "waiting up to 10 s for the watch to name the cause" in seen_at_exit[0]
    assert "ddpnet: watch: rank 0 exits (4): rank-gone: rank 1 (h1) is gone" in seen_at_exit[0]
    assert sys.stderr is not None and not isinstance(sys.stderr, io.StringIO)


def test_a_ranks_own_error_is_its_own_traceback_at_once(tmp_path: Path) -> None:
    ending, exits, printed = _ending(tmp_path, wait=10)
    exc = ValueError("bad batch")
    start = time.monotonic()
    ending.excepthook(type(exc), exc, None)
    assert time.monotonic() - start < 5 and printed == [exc] and exits == []  # not the 10 s


def test_without_a_verdict_the_wait_is_bounded(tmp_path: Path) -> None:
    ending, exits, printed = _ending(tmp_path, wait=0.3)
    exc = dist.DistBackendError("Connection closed by peer")
    start = time.monotonic()
    ending.excepthook(type(exc), exc, None)  # the hub's grace (2 s) outlasts the wait
    assert time.monotonic() - start < 1.5 and printed == [exc] and exits == []


def _gone_hub(tmp_path: Path, exits: list[tuple[int, int]], *, drop: bool
               ) -> tuple[Ending, socket.socket]:
    """Rank 0 connected to a hub that welcomed it, then went away as a hub whose node lost
    its link looks from a rank's side: nothing acknowledged any more, the port refused
    (``drop``: the connection closed too, as the link's timeout closes it)."""
    listener = listen_socket("127.0.0.1", 0)
    port = listener.getsockname()[1]
    b0 = beacon(0, tmp_path, exits)
    b0.peers = {}

    def welcome() -> socket.socket:
        conn, _ = listener.accept()
        lines = Lines()
        while not any(m.get("t") == "hello" for m in lines.feed(conn.recv(4096))):
            pass
        conn.sendall(encode({"t": "welcome", "token": TOKEN}))
        return conn

    accepted: list[socket.socket] = []
    waiter = threading.Thread(target=lambda: accepted.append(welcome()))
    waiter.start()
    b0.connect("127.0.0.1", port, token=TOKEN)
    waiter.join(5)
    listener.close()
    conn = accepted[0]
    if drop:
        conn.close()
        assert wait_for(lambda: b0.sock is None, 5)
    ending = Ending(b0, verdict_wait=VERDICT_WAIT)
    ending.previous_hook = lambda *_args: None
    return ending, conn


def test_a_rank_dying_of_a_peer_without_its_hub_connection_judges_itself_at_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The hub's node went down and the link's timeout closed the connection; a peer that
    judged itself first closed its gloo pair on this rank: no verdict can come, so this rank
    names the cause itself instead of dying with a traceback that names nobody."""
    exits: list[tuple[int, int]] = []
    ending, _conn = _gone_hub(tmp_path, exits, drop=True)
    exc = RuntimeError("[pair.cc:553] Connection closed by peer [198.18.0.3]:9883")
    start = time.monotonic()
    ending.excepthook(type(exc), exc, None)
    took = time.monotonic() - start
    assert exits == [(0, 4)] and took < VERDICT_WAIT / 2, (exits, took)
    err = capsys.readouterr().err
    assert "ddpnet: watch: rank 0 exits (4): network: rank 0 (h0" in err, err
    assert "refuses connections: the hub process is gone" in err, err


def test_a_dying_rank_judges_by_the_hubs_silence_not_by_its_last_progress(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its connection still open but the hub silent past the threshold: the error that ends
    the rank is no progress, so it does not wait a threshold more (past the verdict wait)."""
    exits: list[tuple[int, int]] = []
    ending, conn = _gone_hub(tmp_path, exits, drop=False)
    beacon0 = ending.beacon
    beacon0.threshold = learn(learned({}), override=3.0)  # judged 5 s after the last word or progress
    beacon0.heard -= 10.0  # the hub went quiet 10 s ago ...
    beacon0.progress, beacon0.progressed = ("just now",), time.monotonic()  # ... a step ended
    try:
        exc = RuntimeError("Connection reset by peer")
        start = time.monotonic()
        ending.excepthook(type(exc), exc, None)
        took = time.monotonic() - start
    finally:
        conn.close()
    assert exits == [(0, 4)] and took < VERDICT_WAIT / 2, (exits, took)
    assert "the hub process is gone" in capsys.readouterr().err
