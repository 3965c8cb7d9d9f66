"""A rank that dies of a peer's failure (gloo's "Connection closed by peer" raised in the
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
from ddpnet.watch.session import Session, peer_failure
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


def _session(tmp_path: Path, wait: float) -> tuple[Session, list[tuple[int, int]],
                                                   list[BaseException]]:
    exits: list[tuple[int, int]] = []
    _hub, _port, _thread, b0, b1 = connected_pair(tmp_path, exits)
    printed: list[BaseException] = []
    session = Session(b0.recorder, b0, lambda: None, None, verdict_wait=wait)

    def hook(_kind: type[BaseException], exc: BaseException, _tb: TracebackType | None) -> None:
        printed.append(exc)

    session.previous_hook = hook
    # rank 1 is killed: its side channel closes without a goodbye
    sock = b1.sock
    b1.stopped.set()
    assert sock is not None
    sock.close()
    return session, exits, printed


def test_a_rank_dying_of_a_peers_failure_exits_with_the_verdict(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    session, exits, printed = _session(tmp_path, wait=10)
    exc = dist.DistBackendError("[pair.cc:534] Connection closed by peer [127.0.0.1]:4242")
    start = time.monotonic()
    session.excepthook(type(exc), exc, None)
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
    session, exits, _printed = _session(tmp_path, wait=10)
    session.previous_hook = lambda kind, exc, tb: sys.stderr.write(f"Traceback: {exc}\n")
    seen_at_exit: list[str] = []
    record = session.beacon.exit_now

    def exit_now(code: int) -> None:  # what the process had printed when os._exit came
        seen_at_exit.append(capsys.readouterr().err)
        record(code)

    session.beacon.exit_now = exit_now

    def torchs_hook(*args: Any) -> None:
        old_stderr = sys.stderr
        sys.stderr = buf = io.StringIO()
        try:
            session.excepthook(*args)
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
    session, exits, printed = _session(tmp_path, wait=10)
    exc = ValueError("bad batch")
    start = time.monotonic()
    session.excepthook(type(exc), exc, None)
    assert time.monotonic() - start < 5 and printed == [exc] and exits == []  # not the 10 s


def test_without_a_verdict_the_wait_is_bounded(tmp_path: Path) -> None:
    session, exits, printed = _session(tmp_path, wait=0.3)
    exc = dist.DistBackendError("Connection closed by peer")
    start = time.monotonic()
    session.excepthook(type(exc), exc, None)  # the hub's grace (2 s) outlasts the wait
    assert time.monotonic() - start < 1.5 and printed == [exc] and exits == []


def _gone_hub(tmp_path: Path, exits: list[tuple[int, int]], *, drop: bool
               ) -> tuple[Session, socket.socket]:
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
    session = Session(b0.recorder, b0, lambda: None, None, verdict_wait=VERDICT_WAIT)
    session.previous_hook = lambda *_args: None
    return session, conn


def test_a_rank_dying_of_a_peer_without_its_hub_connection_judges_itself_at_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The hub's node went down and the link's timeout closed the connection; a peer that
    judged itself first closed its gloo pair on this rank: no verdict can come, so this rank
    names the cause itself instead of dying with a traceback that names nobody."""
    exits: list[tuple[int, int]] = []
    session, _conn = _gone_hub(tmp_path, exits, drop=True)
    exc = RuntimeError("[pair.cc:553] Connection closed by peer [198.18.0.3]:9883")
    start = time.monotonic()
    session.excepthook(type(exc), exc, None)
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
    session, conn = _gone_hub(tmp_path, exits, drop=False)
    beacon0 = session.beacon
    beacon0.threshold = learn(learned({}), override=3.0)  # judged 5 s after the last word or progress
    beacon0.heard -= 10.0  # the hub went quiet 10 s ago ...
    beacon0.progress, beacon0.progressed = ("just now",), time.monotonic()  # ... a step ended
    try:
        exc = RuntimeError("Connection reset by peer")
        start = time.monotonic()
        session.excepthook(type(exc), exc, None)
        took = time.monotonic() - start
    finally:
        conn.close()
    assert exits == [(0, 4)] and took < VERDICT_WAIT / 2, (exits, took)
    assert "the hub process is gone" in capsys.readouterr().err


def test_a_long_phase_held_by_with_survives_the_phase_marks_inside_it() -> None:
    from ddpnet.watch.session import phase, recorder

    rec = recorder()
    with phase("warmup"):
        assert rec.long_phase == "warmup"
        since = rec.long_since
        with phase("data"):
            assert (rec.phase, rec.long_phase) == ("data", "warmup")
        phase("forward")  # a plain mark inside keeps it too
        assert (rec.phase, rec.long_phase, rec.long_since) == ("forward", "warmup", since)
        with phase("checkpoint"):
            assert rec.long_phase == "checkpoint"
        assert rec.long_phase == "warmup" and rec.long_since == since
    assert rec.long_phase == ""
    phase("eval")  # a plain mark of a long phase lasts until the next plain mark
    assert rec.long_phase == "eval"
    phase("data")
    assert (rec.phase, rec.long_phase) == ("data", "")
    phase("")


def test_the_metrics_settings_come_from_the_argument_else_the_environment() -> None:
    from ddpnet.errors import ConfigError
    from ddpnet.watch.session import watch_config

    env = {"DDPNET_METRICS_PORT": "9464", "SLURM_JOB_ID": "77", "DDPNET_METRICS_PROBE_S": "30",
           "DDPNET_METRICS_LINGER_S": "20"}
    wc = watch_config(env)
    assert (wc.metrics_port, wc.probe_every, wc.job_id, wc.metrics_linger) == \
        (9464, 30.0, "77", 20.0)
    assert watch_config({}).metrics_linger == 60.0
    assert watch_config(env, metrics_port=9500).metrics_port == 9500
    assert watch_config({}).metrics_port is None and watch_config({}).job_id == ""
    assert watch_config({"TORCHELASTIC_RUN_ID": "none"}).job_id == ""  # torchrun's default
    assert watch_config({"DDPNET_JOB_ID": "a", "SLURM_JOB_ID": "b"}).job_id == "a"
    for bad in ({"DDPNET_METRICS_PORT": "http"}, {"DDPNET_METRICS_PORT": "70000"},
                {"DDPNET_METRICS_PROBE_S": "-1"}, {"DDPNET_METRICS_PROBE_S": "nan"},
                {"DDPNET_METRICS_LINGER_S": "soon"}, {"DDPNET_METRICS_LINGER_S": "7200"}):
        with pytest.raises(ConfigError):
            watch_config(bad)
