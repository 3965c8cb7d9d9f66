"""The store protocol on a real TCPStore: bounded waits, gathering, Ctrl-C within a slice."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from ddpnet.check.store import WAIT_SLICE, StageTimeout, Store


@pytest.fixture
def store() -> Iterator[Store]:
    import torch.distributed as dist

    raw = dist.TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=10),
                        wait_for_workers=False)
    yield Store(raw)


def test_get_returns_what_was_set_and_times_out_on_what_was_not(store: Store) -> None:
    store.set("plan", {"ok": True})
    assert store.get("plan", 1.0) == {"ok": True}
    started = time.monotonic()
    with pytest.raises(StageTimeout, match="result"):
        store.get("result", 1.2)
    assert 1.1 <= time.monotonic() - started < 1.2 + 2 * WAIT_SLICE
    store.set("result", 1)  # the connection is still in step after timed-out slices
    assert store.get("result", 1.0) == 1


def test_gather_and_counters(store: Store) -> None:
    for rank in (0, 2):
        store.publish("facts", rank, {"rank": rank})
    started = time.monotonic()
    got = store.gather("facts", [0, 1, 2], timeout=0.5)
    assert got == {0: {"rank": 0}, 2: {"rank": 2}}  # rank 1 never came: bounded
    assert time.monotonic() - started >= 0.5
    assert store.count("facts/n") == 2 and store.wait_count("facts/n", 1, 5.0) == 2
    assert not store.has("mesh/0")


def test_ctrl_c_is_answered_within_one_slice(store: Store) -> None:
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    started = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        store.get("never", 30.0)
    assert time.monotonic() - started < 0.3 + WAIT_SLICE + 0.5


def _cfg(addr: str, port: int) -> object:
    from ddpnet.config import DistConfig

    return DistConfig("manual", 0, 2, 0, 1, 0, 2, addr, port, "env://")


def test_rank0_listens_on_master_addr_only_not_every_interface() -> None:
    """Issue 17: the check's store is unauthenticated; it listens on MASTER_ADDR's own
    address (here loopback), not on [::] or 0.0.0.0."""
    import socket

    from ddpnet.check.store import listen_early
    from ddpnet.net.ports import free_port

    port = free_port()
    early = listen_early(_cfg("127.0.0.1", port), "here")  # type: ignore[arg-type]
    assert early.fd is not None
    sock = socket.socket(fileno=early.fd)
    try:
        assert sock.getsockname()[:2] == ("127.0.0.1", port)
        assert early.relays == ()  # ::1 is loopback: nothing to relay
    finally:
        sock.close()
        early.close()


def test_a_master_addr_that_is_not_ours_listens_everywhere() -> None:
    """A VIP / NAT address (not this host's): only then every interface, as before."""
    import socket

    from ddpnet.check.store import listen_early
    from ddpnet.net.ports import free_port

    port = free_port()
    early = listen_early(_cfg("198.18.254.254", port), "here")  # type: ignore[arg-type]
    assert early.fd is not None
    sock = socket.socket(fileno=early.fd)
    try:
        assert sock.getsockname()[0] in ("::", "0.0.0.0")
    finally:
        sock.close()
        early.close()


def test_a_large_job_waits_in_longer_slices_so_rank_0_answers_a_bounded_rate() -> None:
    from ddpnet.rendezvous import wait_slice

    assert wait_slice(2, WAIT_SLICE) == WAIT_SLICE and wait_slice(1024, WAIT_SLICE) == 1.024
    assert wait_slice(4096, WAIT_SLICE) == 4.096 and wait_slice(100_000) == 5.0
    assert wait_slice(2) == 0.25  # init()'s rendezvous and GroupGuard
    # N ranks each asking twice a slice: ~4,000 requests a second from 1,000 ranks up
    assert all(2 * n / wait_slice(n, WAIT_SLICE) <= 4001 for n in (1000, 4096, 8000))


def test_get_many_reads_what_is_set_in_chunks_and_skips_what_is_not(store: Store) -> None:
    from ddpnet.check import store as store_module

    for i in range(store_module.CHUNK + 3):
        store.publish("facts", i, {"rank": i})
    names = [f"facts/{i}" for i in range(store_module.CHUNK + 5)]
    got = store.get_many(names)
    assert sorted(got) == sorted(names[:store_module.CHUNK + 3])
    assert got["facts/7"] == {"rank": 7}
    assert store.gather("facts", [0, 1, store_module.CHUNK + 4], 0.1) == \
        {0: {"rank": 0}, 1: {"rank": 1}}


def test_a_store_that_goes_silent_after_the_join_is_given_up_within_its_bound() -> None:
    """A real TCPStore server frozen after the join (its kernel still ACKs, nothing answers):
    torch's client blocks for good once a wait times out (STOP_WAITING is never answered), as
    when a duplicate address sends the master's packets to another host. A rank > 0's store
    gives up after the wait + ``stall_s`` and fails every later call at once."""
    import subprocess
    import sys

    import torch.distributed as dist

    from ddpnet.net.ports import free_port

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", "import datetime, time, torch.distributed as d; "
         f"s = d.TCPStore('127.0.0.1', {port}, None, True, datetime.timedelta(seconds=30), "
         "wait_for_workers=False); print('up', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "up"
        raw = dist.TCPStore("127.0.0.1", port, None, False, timedelta(seconds=5))
        store = Store(raw, bounded=True, stall_s=1.0)
        store.set("plan", {"ok": True})
        assert store.get("plan", 1.0) == {"ok": True}  # in step while the server answers
        os.kill(server.pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(StageTimeout, match="stopped answering"):
            store.get("result", 1.0)
        assert time.monotonic() - started < 1.0 + WAIT_SLICE + 1.0 + 1.0
        assert store.gone
        started = time.monotonic()
        with pytest.raises(StageTimeout, match="ack"):
            store.add("ack")
        assert time.monotonic() - started < 1.0  # not another stall_s wait
    finally:
        os.kill(server.pid, signal.SIGCONT)
        server.kill()
        server.wait()


def test_a_call_may_stall_longer_in_a_bigger_job_before_the_store_counts_as_gone() -> None:
    from ddpnet.check.store import STALL_S, stall_for

    # 4,096 simulated ranks: joins waiting their turn at rank 0's one store thread took
    # over 15 s, and were given up as missing ranks
    assert stall_for(2) == stall_for(1024) == STALL_S
    assert stall_for(4096) == 40.96
