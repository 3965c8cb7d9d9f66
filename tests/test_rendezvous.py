"""init()'s own rendezvous store: rank 0 listens on MASTER_ADDR's address only, and a rank
that never comes is named in seconds on every rank that did (real processes, real gloo)."""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil

from ddpnet.config import DistConfig
from ddpnet.net.ports import free_port, store_address
from ddpnet.rendezvous import missing_message, own_store
from tests import zygote
from tests.conftest import clean_environ
from tests.net.fixtures import cfg

WORKER = str(Path(__file__).with_name("net") / "init_worker.py")
ROOT = str(Path(__file__).resolve().parents[1])


def _rank(rank: int, world: int, port: int, join: float) -> Any:
    env = clean_environ({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                         "WORLD_SIZE": str(world), "RANK": str(rank),
                         "PYTHONPATH": f"{ROOT}/src:{ROOT}",
                         "NT_CONNECT_TIMEOUT": "20", "NT_JOIN_TIMEOUT": str(join)})
    return zygote.popen([WORKER], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        text=True)


def _result(proc: Any) -> dict[str, object]:
    out, err = proc.communicate(timeout=120)
    assert "Traceback" not in err, err
    return dict(json.loads(out.strip().splitlines()[-1]))


def test_a_rank_that_never_comes_is_named_in_seconds_on_every_rank_that_did() -> None:
    port = free_port()
    t0 = time.monotonic()
    # rank 2 never starts; rank 1 has 15 s to import torch and join once rank 0 listens
    procs = [_rank(0, 3, port, 15.0), _rank(1, 3, port, 15.0)]
    rank0, rank1 = (_result(p) for p in procs)
    elapsed = time.monotonic() - t0
    for out in (rank0, rank1):
        assert out["cause"] == "missing-ranks", out
        assert "1 of 3 ranks did not join" in str(out["message"])
        assert "rank(s) 2" in str(out["message"]) and "join_timeout" in str(out["hint"])
    assert procs[0].returncode == 1 and procs[1].returncode == 1
    assert elapsed < 15 + 45  # not torch's 30 minutes: the join window plus importing torch


def test_the_store_listens_on_master_addr_not_every_interface() -> None:
    port = free_port()
    proc = _rank(0, 2, port, 20.0)  # waits for rank 1, which comes late
    try:
        deadline = time.monotonic() + 60
        listening: list[str] = []
        while not listening and time.monotonic() < deadline:
            listening = [c.laddr.ip for c in psutil.net_connections("tcp")
                         if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
            time.sleep(0.1)
        assert listening == ["127.0.0.1"], listening
        late = _rank(1, 2, port, 20.0)
        assert _result(late)["sum"] == 3.0
        assert _result(proc)["sum"] == 3.0
    finally:
        proc.kill()


def test_store_address_prefers_master_addrs_own_address() -> None:
    local = frozenset({"127.0.0.1", "10.0.0.5", "fe80::1"})
    assert store_address(("10.0.0.5",), local) == "10.0.0.5"
    assert store_address(("192.0.2.9", "10.0.0.5"), local) == "10.0.0.5"
    assert store_address(("192.0.2.9",), local) == ""  # not ours: every interface
    assert store_address((), local) == ""


def test_own_store_only_where_torch_would_host_one() -> None:
    base: DistConfig = cfg()
    assert own_store(base, {})
    assert not own_store(base, {"TORCHELASTIC_USE_AGENT_STORE": "True"})
    assert not own_store(cfg(init_method="file:///tmp/x"), {})


def test_missing_message_names_ranks_and_nodes_and_stays_short() -> None:
    big = replace(cfg(rank=0, world=1000, nodes=125),
                  hosts=tuple(f"n{i:03d}" for i in range(125)))
    text = missing_message(big, "n000", list(range(8, 40)), 60)
    assert text.startswith("32 of 1000 ranks did not join the rendezvous at ")
    assert "rank(s) 8, 9, 10, 11, 12, 13, 14, 15 and 24 more" in text
    assert "(expected on n001, n002, n003, n004)" in text and "within 60 s" in text



def test_a_rank_with_another_world_size_stops_every_rank_at_once() -> None:
    # a stale launcher line: rank 1 says WORLD_SIZE=3, rank 0 says 2; without the check rank
    # 0 counts two joins and the group waits for rank 2 for torch's whole timeout
    port = free_port()
    t0 = time.monotonic()
    procs = [_rank(0, 2, port, 30.0), _rank(1, 3, port, 30.0)]
    rank0, rank1 = (_result(p) for p in procs)
    elapsed = time.monotonic() - t0
    for out in (rank0, rank1):
        assert out["cause"] == "world-size-mismatch", out
        assert "rank 1 on " in str(out["message"]) and "WORLD_SIZE=3, rank 0 on " \
            in str(out["message"]) and "WORLD_SIZE=2" in str(out["message"])
        assert "same WORLD_SIZE on every node" in str(out["hint"])
    assert procs[0].returncode == 1 and procs[1].returncode == 1
    assert elapsed < 30  # at once, not after the 30 s join window


def test_world_message_names_both_sides_or_nothing() -> None:
    from ddpnet.rendezvous import world_message

    assert world_message(cfg(rank=1, world=4), "n1", 4, "n0") is None
    text = world_message(cfg(rank=2, world=8), "n2", 4, "n0")
    assert text is not None and text.startswith("rank 2 on n2 has WORLD_SIZE=8, rank 0 on n0 "
                                                "WORLD_SIZE=4")


def test_a_rank_used_twice_stops_every_rank_at_once() -> None:
    # two processes with RANK=1 (a copied launcher line): init's join count would reach 3
    # without rank 2, and the group would hang for torch's whole timeout
    port = free_port()
    t0 = time.monotonic()
    procs = [_rank(0, 3, port, 30.0), _rank(1, 3, port, 30.0), _rank(1, 3, port, 30.0)]
    outs = [_result(p) for p in procs]
    elapsed = time.monotonic() - t0
    for out in outs:
        assert out["cause"] == "duplicate-rank", out
        assert "RANK=1 is used twice" in str(out["message"]) and "own RANK" in str(out["hint"])
    assert all(p.returncode == 1 for p in procs)
    assert elapsed < 30  # at once, not after the 30 s join window


def test_the_line_for_another_ranks_group_failure_names_it_and_not_this_rank() -> None:
    from ddpnet.rendezvous import group_failed_message

    one = cfg(rank=1, world=3, nodes=3)
    line = group_failed_message(one, "n1", "0\nn0\nconnect: Network is unreachable")
    assert line == ("rank 1 on n1: the process group cannot form: rank 0 on n0 failed to "
                    "connect to its peers (connect: Network is unreachable), so the ranks "
                    "waiting for it would wait for the group's whole timeout")
    assert group_failed_message(one, "n1", "1\nn1\nmine") is None  # its own report
    assert group_failed_message(one, "n1", "garbage") is None
    assert group_failed_message(one, "n1", "") is None


def test_the_first_group_failure_stays_and_a_later_one_learns_it_came_second() -> None:
    # rank 2 fails because rank 0 already left (its port refuses): rank 2's report must
    # neither hide rank 0's cause from the ranks still waiting nor claim to be the cause
    from datetime import timedelta

    import torch.distributed as dist

    from ddpnet.rendezvous import (
        GROUP_FAILED,
        group_failed_message,
        report_group_failure,
    )

    store = dist.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=5))  # type: ignore[attr-defined]
    first = report_group_failure(store, cfg(rank=1, world=3, nodes=3), "n1",
                                 "connect: Network is unreachable")
    assert first is None  # the first report is the cause
    two = cfg(rank=2, world=3, nodes=3)
    earlier = report_group_failure(store, two, "n2", "Connection refused")
    assert earlier == "1\nn1\nconnect: Network is unreachable"
    assert store.get(GROUP_FAILED) == b"1\nn1\nconnect: Network is unreachable"
    line = group_failed_message(two, "n2", earlier, "Connection refused")
    assert line == ("rank 2 on n2: the process group cannot form: rank 1 on n1 failed to "
                    "connect to its peers first (connect: Network is unreachable); this "
                    "rank's own failure followed from it (Connection refused)")
    assert group_failed_message(two, "n2", "2\nn2\nmine", "x") is None
    assert group_failed_message(two, "n2", "garbage", "x") is None
