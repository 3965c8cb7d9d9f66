"""What ``check``'s networks detector (issue #18, kind 6: ``slower-network-chosen``) costs
rank 0 as the cluster grows, and what its stage adds to a check.

Rank 0's side is pure: ``networks.plan`` over every rank's facts (N hosts, each with the
job's network and 0-4 others), and ``networks.judge`` over the rates. Facts are built from
interface tables as the facts stage builds them (``binding_facts`` + ``nic_facts``). The stage's
streams do not grow with N: one sender, at most 1 + MAX_ALTERNATIVES streams of SECONDS each
(their time on a lab is in check_speed.json, case slower-network-chosen).

    .venv/bin/python benchmarks/networks_plan.py [--sizes 4,32,256,1024]

Writes benchmarks/results/networks_plan.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from ddpnet.check import networks  # noqa: E402
from ddpnet.check.compare import NodeFacts  # noqa: E402
from ddpnet.check.nics import nic_facts  # noqa: E402
from ddpnet.check.stages.facts import binding_facts  # noqa: E402
from ddpnet.net.interfaces import Address, Interface  # noqa: E402


def _iface(name: str, ip: str, prefix: int, speed: int | None) -> Interface:
    return Interface(name, True, (Address(ip, prefix, 4),), 1500, speed, "physical")


def host_facts(r: int, others: int) -> NodeFacts:
    """Rank ``r``: eth0 on 10.0.0.0/16 (the job's) and ``others`` more networks."""
    ip = f"{r // 250}.{r % 250 + 1}"
    table = [Interface("lo", True, (Address("127.0.0.1", 8, 4),), 65536, None, "loopback"),
             _iface("eth0", f"10.0.{ip}", 16, 1000),
             *(_iface(f"ib{k}", f"10.{k + 1}.{ip}", 16, 100000) for k in range(others))]
    facts: dict[str, Any] = {"hostname": f"n{r}", "address": f"10.0.{ip}", "interface": "eth0",
                             "subnet": "10.0.0.0/16",
                             **binding_facts({}, table, [i.name for i in table]),
                             **nic_facts(table, "auto", "routes to MASTER_ADDR",
                                         lambda _k: None)}
    return NodeFacts(r, facts)


def median_s(fn: Any, repeat: int = 5) -> float:
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t)
    return round(statistics.median(runs), 6)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="4,32,256,1024")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/networks_plan.json"))
    args = ap.parse_args()
    rows = []
    for n in (int(x) for x in args.sizes.split(",")):
        for others in (0, 1, 4):
            nodes = [host_facts(r, others) for r in range(n)]
            p = networks.plan(nodes)
            row = {"ranks": n, "other_networks": others,
                   "measured_networks": len(p.networks) if p else 0,
                   "plan_s": median_s(lambda nodes=nodes: networks.plan(nodes))}
            if p is not None:
                gbps = [0.9] + [30.0] * len(p.others)
                cause = networks.judge(p, gbps, {})
                row["judge_s"] = median_s(lambda p=p, g=gbps: networks.judge(p, g, {}))
                row["cause"] = cause.id if cause else None
                row["facts_bytes_per_rank"] = len(json.dumps(nodes[1].facts.get("links")))
            rows.append(row)
            print(row)
    out = {"benchmark": "networks_plan",
           "measured": "rank 0's networks.plan/judge over N ranks' facts (median of 5); "
                       "facts_bytes_per_rank: the 'links' fact each rank adds",
           "host": {"cpus": os.cpu_count(), "load_avg": os.getloadavg(),
                    "python": platform.python_version()},
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "streams": {"sender": 1, "max_networks": 1 + networks.MAX_ALTERNATIVES,
                       "seconds_each": networks.SECONDS},
           "rows": rows}
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
