"""The staged check in-process (one rank) with injected pieces: the bench hook and facts."""

from __future__ import annotations

from typing import Any

import pytest

from ddpnet.check.options import CheckOptions
from ddpnet.check.run import _require_address, check_rank, export_interface, worker_argv
from ddpnet.check.tools import Tools
from ddpnet.config import DistConfig
from ddpnet.env.resolve import resolve
from ddpnet.errors import RendezvousError
from ddpnet.net.ports import free_port
from ddpnet.net.select import Choice, Selection


def loopback() -> Selection:
    pinned = Choice("lo", "GLOO_SOCKET_IFNAME", "test")
    return Selection("lo", "127.0.0.1", pinned, Choice("=lo", "auto", "test"),
                     Choice("lo", "auto", "test"), master="127.0.0.1")


def test_one_rank_runs_every_stage_and_the_injected_bench() -> None:
    port = free_port()
    cfg: DistConfig = resolve({"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                               "MASTER_PORT": str(port)})
    seen: dict[str, Any] = {}

    def bench(link: float) -> dict[str, Any]:
        import torch.distributed as dist

        seen["initialized"] = dist.is_initialized()  # the group is still up for the bench
        seen["link"] = link
        return {"rows": [{"bytes": 1 << 20, "busbw_gbps": 1.0}]}

    tools = Tools(
        select=lambda c, e: loopback(),
        facts=lambda c, s, e: {"hostname": "box", "torch": "9.9", "mtu": 1500},
        bench=bench,
    )
    import os

    before = {v: os.environ.get(v) for v in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME",
                                              "TP_SOCKET_IFNAME")}
    out = check_rank(cfg, CheckOptions(bench=True, matrix=True, join_timeout=2), tools,
                     {"GLOO_SOCKET_IFNAME": "lo"}, lambda _m: None)
    # the run's interface variables are put back: GLOO_SOCKET_IFNAME=lo left in this process
    # sent every lab node started later in the test session over loopback
    assert {v: os.environ.get(v) for v in before} == before
    assert out.report is not None and out.ok
    report = out.report.to_dict()
    assert report["verdict"] == "pass" and report["bench"]["rows"][0]["busbw_gbps"] == 1.0
    assert seen == {"initialized": True, "link": 0.0}
    assert report["nodes"][0]["torch"] == "9.9" and report["allreduce"]["ok"]
    assert {"rendezvous", "facts", "reachability", "process_group", "bench"} <= set(
        report["timings"])


def test_the_interface_torch_reads_is_this_ranks_own_or_the_automatic_one() -> None:
    sel = loopback()  # GLOO pinned by the user, NCCL/TP automatic
    process = {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "eth0"}
    export_interface(sel, {"GLOO_SOCKET_IFNAME": "lo"}, process)  # a --local rank 0
    assert process == {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "=lo",
                       "TP_SOCKET_IFNAME": "lo"}
    mine = {"NCCL_SOCKET_IFNAME": "ib0"}
    export_interface(sel, mine, mine)  # a launched rank: its own values stay
    assert mine == {"NCCL_SOCKET_IFNAME": "ib0", "TP_SOCKET_IFNAME": "lo"}


def test_no_address_after_the_preflight_is_named() -> None:
    cfg = resolve({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "10.9.9.9",
                   "MASTER_PORT": "29500"})
    unset = Choice(None, "unset", "no route to MASTER_ADDR 10.9.9.9 on this host")
    with pytest.raises(RendezvousError) as info:
        _require_address(cfg, Selection(None, None, unset, unset, unset), "n1")
    assert info.value.cause == "master-no-route" and "no route" in info.value.message
    assert info.value.hint


def test_local_workers_run_the_check_module_not_the_cli() -> None:
    argv = worker_argv(CheckOptions(local=3, report_path="r.html"))
    assert argv[1:3] == ["-m", "ddpnet.check"]
    assert CheckOptions.from_json(argv[3]) == CheckOptions(matrix=True)
