"""The staged check in-process (one rank) with injected pieces: the bench hook and facts."""

from __future__ import annotations

from typing import Any

from ddpnet.check.options import CheckOptions
from ddpnet.check.run import check_rank
from ddpnet.check.tools import Tools
from ddpnet.config import DistConfig
from ddpnet.env.resolve import resolve
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
    out = check_rank(cfg, CheckOptions(bench=True, matrix=True, join_timeout=2), tools,
                     {"GLOO_SOCKET_IFNAME": "lo"}, lambda _m: None)
    assert out.report is not None and out.ok
    report = out.report.to_dict()
    assert report["verdict"] == "pass" and report["bench"]["rows"][0]["busbw_gbps"] == 1.0
    assert seen == {"initialized": True, "link": 0.0}
    assert report["nodes"][0]["torch"] == "9.9" and report["allreduce"]["ok"]
    assert {"rendezvous", "facts", "reachability", "process_group", "bench"} <= set(
        report["timings"])
