"""The staged runner in-process (one rank) with injected pieces: the bench hook and facts."""

from __future__ import annotations

from typing import Any

from ddpnet.check.deps import Deps, simple_preflight
from ddpnet.check.local import Selected
from ddpnet.check.runner import CheckOptions, run_check
from ddpnet.config import DistConfig
from ddpnet.env.resolve import resolve
from ddpnet.net.ports import free_port


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

    deps = Deps(
        select=lambda c, e: Selected("lo", "127.0.0.1", "test", True, {}),
        preflight=simple_preflight,
        facts=lambda c, s: {"hostname": "box", "torch": "9.9", "mtu": 1500},
        bench=bench,
    )
    out = run_check(cfg, CheckOptions(bench=True, matrix=True, join_timeout=2), deps,
                    {"GLOO_SOCKET_IFNAME": "lo"})
    assert out.report is not None and out.ok
    report = out.report.to_dict()
    assert report["verdict"] == "pass" and report["bench"]["rows"][0]["busbw_gbps"] == 1.0
    assert seen == {"initialized": True, "link": 0.0}
    assert report["nodes"][0]["torch"] == "9.9" and report["allreduce"]["ok"]
    assert {"rendezvous", "facts", "reachability", "process_group", "bench"} <= set(
        report["timings"])
