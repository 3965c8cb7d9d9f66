"""The hub and the heartbeat over real loopback sockets (no torch, no process group)."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from ddpnet.net.ports import listen_socket
from ddpnet.watch.heartbeat import Beacon
from ddpnet.watch.hub import Hub, HubOptions, ask_snapshot
from ddpnet.watch.recorder import Recorder
from ddpnet.watch.state import RankState

TOKEN = "127.0.0.1:1:2"


def start_hub(tmp_path: Path, timeout: float = 30) -> tuple[Hub, int, threading.Thread]:
    sock = listen_socket("127.0.0.1", 0)
    sock.setblocking(False)
    port = sock.getsockname()[1]
    hub = Hub(HubOptions("127.0.0.1", port, 2, timeout, "exit", str(tmp_path), TOKEN), sock)
    thread = threading.Thread(target=hub.serve, daemon=True)
    thread.start()
    return hub, port, thread


def beacon(rank: int, tmp_path: Path, exits: list[tuple[int, int]]) -> Beacon:
    rec = Recorder()
    rec.use_fr = False
    return Beacon(rec, RankState(rank=rank, world_size=2, host=f"h{rank}"), tmp_path,
                  period=0.2, exit_now=lambda code: exits.append((rank, code)))


def wait_for(predicate: object, seconds: float = 10) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def test_a_rank_that_vanishes_is_named_and_the_others_told_to_exit(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hub, port, thread = start_hub(tmp_path)
    exits: list[tuple[int, int]] = []
    b0, b1 = beacon(0, tmp_path, exits), beacon(1, tmp_path, exits)
    b0.connect("127.0.0.1", port, token=TOKEN)
    b1.connect("127.0.0.1", port, token=TOKEN)
    assert wait_for(lambda: len(hub.states) == 2)
    snapshot, _stale = ask_snapshot("127.0.0.1", port)
    assert snapshot.states[1] is not None and snapshot.states[1].host == "h1"
    sock = b1.sock
    b1.stopped.set()
    assert sock is not None
    sock.close()  # as a SIGKILL would: no goodbye
    assert wait_for(lambda: exits == [(0, 4)])
    thread.join(10)
    assert not thread.is_alive()  # the hub leaves after its verdict
    err = capsys.readouterr().err
    assert "ddpnet watch: rank-gone" in err and "rank 1 (h1) is gone" in err
    assert (tmp_path / "report.json").exists() and (tmp_path / "rank-0.json").exists()


def test_a_clean_goodbye_is_no_fault_and_the_hub_leaves(tmp_path: Path) -> None:
    hub, port, thread = start_hub(tmp_path)
    exits: list[tuple[int, int]] = []
    beacons = [beacon(r, tmp_path, exits) for r in (0, 1)]
    for b in beacons:
        b.connect("127.0.0.1", port, token=TOKEN)
    for b in beacons:
        b.close()
    thread.join(10)
    assert not thread.is_alive() and exits == [] and hub.finished == {0, 1}


def test_a_rank_of_another_job_is_refused(tmp_path: Path) -> None:
    _hub, port, _thread = start_hub(tmp_path)
    with pytest.raises(OSError, match="not this job's hub"):
        beacon(0, tmp_path, []).connect("127.0.0.1", port, token="other:1:2", patience=0)


def test_no_hub_is_an_os_error_quickly(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(OSError):
        beacon(0, tmp_path, []).connect("127.0.0.1", port, token=TOKEN, patience=0.5)
    assert time.monotonic() - start < 5
