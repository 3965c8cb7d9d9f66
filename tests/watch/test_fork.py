"""A forked child never speaks for its parent's rank (issue 56): a raw ``os.fork()`` child
that exits normally ran the inherited ``atexit`` goodbye and told the hub, over the parent's
socket, that the parent's rank had finished. Real hub, real sockets, a real fork."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from ddpnet.watch import session as session_module
from ddpnet.watch.session import Session
from tests.watch.test_hub import connected_pair, wait_for


def _child(body: object) -> int:
    """Run ``body`` in a forked child that then exits 0 (its exit code: 1 if it raised)."""
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        code = 0
        try:
            code = int(body() or 0)  # type: ignore[operator]
        except BaseException:  # any failure is the child's answer
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.slow  # seconds of real sockets: outside make test-fast
def test_a_forked_childs_goodbye_is_not_its_parents(tmp_path: Path) -> None:
    exits: list[tuple[int, int]] = []
    hub, _port, _thread, b0, b1 = connected_pair(tmp_path, exits)

    def child() -> int:
        b1.close()  # what the inherited atexit ran
        return 3 if b1.send({"t": "bye", "rank": 1, "error": ""}) else 0

    assert _child(child) == 0
    heard = hub.heard[1]
    time.sleep(1.0)
    assert 1 not in hub.finished and 1 not in hub.left  # the parent's rank still runs
    assert wait_for(lambda: hub.heard[1] > heard)  # and it is still heard
    b0.close()
    b1.close()
    assert wait_for(lambda: hub.finished == {0, 1})  # the parent's own goodbye is heard


@pytest.mark.slow  # seconds of real sockets: outside make test-fast
def test_a_forked_child_has_no_session_and_its_exit_says_goodbye_for_nobody(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exits: list[tuple[int, int]] = []
    hub, _port, _thread, b0, b1 = connected_pair(tmp_path, exits)
    session = Session(b1.recorder, b1, lambda: None, None)
    monkeypatch.setattr(session_module, "_session", session)

    def child() -> int:
        active = session_module.active()
        session_module.stop()  # what atexit runs as the child exits
        return 3 if active else 0

    assert _child(child) == 0
    time.sleep(1.0)
    assert 1 not in hub.finished and session_module.active()  # the parent keeps its own
    b0.close()
    b1.close()


@pytest.mark.slow  # seconds of real sockets: outside make test-fast
def test_a_forked_child_holds_neither_the_ranks_side_port_nor_its_channel(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A DataLoader worker outlives its rank by seconds: it held the rank's listeners (the
    dead rank's side port answered, read as alive) and its channel (no close reached the
    hub until the workers left)."""
    exits: list[tuple[int, int]] = []
    hub, _port, _thread, b0, b1 = connected_pair(tmp_path, exits, ports=True)
    monkeypatch.setattr(session_module, "_session", Session(b1.recorder, b1, lambda: None, None))
    side = b1.ident.extra["ports"]["side"]
    pid = os.fork()
    if pid == 0:  # a worker: lives on after its rank
        time.sleep(4.0)
        os._exit(0)
    try:
        b1.stopped.set()  # the rank dies: its own copies close
        sock = b1.sock
        assert sock is not None
        for listener in b1.listeners:
            listener.close()
        sock.close()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", side), timeout=1.0).close()
        assert wait_for(lambda: 1 in hub.left, 3.0)  # while the worker still lives
    finally:
        os.waitpid(pid, 0)
    b0.close()
