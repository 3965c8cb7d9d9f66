"""A rank that dies of a peer's failure (gloo's "Connection closed by peer" raised in the
user's code) waits for the watch's verdict and exits with its code and named cause; a rank's
own bug does not wait (real hub, real beacons on loopback)."""

from __future__ import annotations

import time
from pathlib import Path
from types import TracebackType

import pytest
import torch.distributed as dist

from ddpnet.watch.session import Session, peer_failure
from tests.watch.test_hub import connected_pair


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


def test_a_ranks_own_error_is_its_own_traceback_at_once(tmp_path: Path) -> None:
    session, exits, printed = _session(tmp_path, wait=10)
    exc = ValueError("bad batch")
    start = time.monotonic()
    session.excepthook(type(exc), exc, None)
    assert time.monotonic() - start < 1 and printed == [exc] and exits == []


def test_without_a_verdict_the_wait_is_bounded(tmp_path: Path) -> None:
    session, exits, printed = _session(tmp_path, wait=0.3)
    exc = dist.DistBackendError("Connection closed by peer")
    start = time.monotonic()
    session.excepthook(type(exc), exc, None)  # the hub's grace (2 s) outlasts the wait
    assert time.monotonic() - start < 1.5 and printed == [exc] and exits == []


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
