"""How fast `ddpnet check` reaches its verdict on a 4-node 1 Gbit/s lab (root required).

Targets (issue #6), time from the last node starting to rank 0's verdict:
healthy without matrix < 10 s, healthy with matrix < 30 s, every injected fault named < 15 s.
Default flags only (join timeout 10 s). Writes benchmarks/results/check_speed.json.

    sudo .venv/bin/python benchmarks/check_speed.py [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# a user's check starts its own interpreter: no test zygote here (tests/zygote.py)
os.environ.setdefault("DDPNET_TEST_ZYGOTE", "0")

from tests.check.labcheck import run_check  # noqa: E402

from ddpnet.lab import Lab  # noqa: E402

PORT = 29510
Setup = Callable[[Lab], "Callable[[], None] | None"]


def _none(lab: Lab) -> None:
    return None


_HTTP = ("import http.server, sys; http.server.HTTPServer(('0.0.0.0', int(sys.argv[1])), "
         "http.server.BaseHTTPRequestHandler).serve_forever()")


def _squat_http(lab: Lab) -> Callable[[], None]:
    """Another service on MASTER_PORT on node 0; returns its stop."""
    proc = lab.popen(0, [sys.executable, "-c", _HTTP, str(PORT)],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        if lab.exec(0, ["ss", "-Hltn", f"sport = :{PORT}"]).stdout.strip():
            break
        time.sleep(0.1)

    def stop() -> None:
        proc.kill()
        proc.wait(10)
    return stop


def _rank0_name_loopback_on_node2(lab: Lab) -> None:
    lab.fault("hosts-entry", 2, host=lab.nodes[0].hostname, address="127.0.1.1")


def _jumbo_behind_1500_port_of_node3(lab: Lab) -> None:
    for node in range(4):
        lab.fault("mtu", node, mtu=9000)
        if node != 3:
            lab.fault("port-mtu", node, mtu=9000)


def _docker0_on_node1(lab: Lab) -> None:
    lab.fault("extra-iface", 1, iface="docker0")


def _second_nic_in_subnet_on_node2(lab: Lab) -> None:
    lab.fault("extra-iface", 2, iface="eth1", address="198.18.0.202/24")


def _eth1_decoy_on_node2(lab: Lab) -> None:
    lab.fault("extra-iface", 2, iface="eth1")


def _ib0_decoy_on_node1(lab: Lab) -> None:
    lab.fault("extra-iface", 1, iface="ib0")


def _same_docker0_everywhere(lab: Lab) -> None:
    for node in range(4):
        lab.fault("extra-iface", node, iface="docker0", address="198.19.254.1/24")


def _node2_behind_vip_and_unreachable(lab: Lab) -> None:
    lab.fault("vip", 2, address="198.18.0.250")
    lab.fault("block-ephemeral", 2, port=PORT)


SCENARIOS: list[dict[str, Any]] = [
    {"name": "healthy-no-matrix", "args": ["--no-matrix"], "expect": None, "target_s": 10},
    {"name": "healthy-matrix", "args": ["--matrix"], "expect": None, "target_s": 30},
    {"name": "missing-ranks", "args": ["--no-matrix"], "nodes": [0, 1, 2],
     "expect": "missing-ranks", "target_s": 15},
    {"name": "duplicate-rank", "args": ["--no-matrix"], "per_node": {2: {"RANK": "1"}},
     "expect": "duplicate-rank", "target_s": 15},
    {"name": "world-size-mismatch", "args": ["--no-matrix"],
     "per_node": {3: {"WORLD_SIZE": "8"}}, "expect": "world-size-mismatch", "target_s": 15},
    {"name": "master-port-filtered", "args": ["--no-matrix"],
     "fault": ("block-port", 0, {"port": PORT}), "expect": "master-port-filtered",
     "expect_on": 1, "target_s": 15},
    {"name": "peer-port-blocked", "args": ["--no-matrix"],
     "fault": ("block-ephemeral", 2, {"port": PORT}), "expect": "peer-port-blocked",
     "target_s": 15},
    {"name": "mtu-mismatch", "args": ["--no-matrix"], "fault": ("mtu", 1, {"mtu": 9000}),
     "expect": "mtu-mismatch", "target_s": 15},
    {"name": "slow-node", "args": ["--matrix"], "fault": ("rate", 3, {"rate": "100mbit"}),
     "expect": "slow-node", "target_s": 15},
    {"name": "hostname-loopback", "args": ["--no-matrix"],
     "fault": ("hostname-loopback", 1, {}), "per_node": {1: {"GLOO_SOCKET_IFNAME": "lo"}},
     "expect": "hostname-loopback", "target_s": 15},
    # issue 18's field failures
    {"name": "master-loopback", "args": ["--no-matrix"],
     "per_node": {i: {"MASTER_ADDR": "localhost"} for i in range(4)},
     "expect": "master-loopback", "expect_on": 1, "target_s": 15},
    {"name": "name-mismatch", "args": ["--no-matrix"], "setup": _rank0_name_loopback_on_node2,
     "expect": "name-mismatch", "target_s": 15},
    {"name": "master-port-foreign", "args": ["--no-matrix"], "setup": _squat_http,
     "expect": "master-port-foreign", "expect_on": 1, "target_s": 15},
    {"name": "port-in-use-holder", "args": ["--no-matrix"], "setup": _squat_http,
     "nodes": [0], "expect": "port-in-use", "target_s": 15},
    {"name": "path-mtu", "args": ["--no-matrix"], "setup": _jumbo_behind_1500_port_of_node3,
     "expect": "path-mtu", "target_s": 15},
    {"name": "nccl-exclusion-leaves-lo", "args": ["--no-matrix"],
     "per_node": {i: {"NCCL_SOCKET_IFNAME": "^docker0"} for i in range(4)},
     "expect": "hostname-loopback", "target_s": 15},
    {"name": "ifname-mismatch-nccl", "args": ["--no-matrix"], "setup": _eth1_decoy_on_node2,
     "per_node": {**{i: {"NCCL_SOCKET_IFNAME": "eth"} for i in range(4)},
                  2: {"NCCL_SOCKET_IFNAME": "eth1"}},
     "expect": "ifname-mismatch", "target_s": 15},
    {"name": "ifname-mismatch-gloo-devices", "args": ["--no-matrix"],
     "setup": _docker0_on_node1, "per_node": {1: {"GLOO_SOCKET_IFNAME": "eth0,docker0"}},
     "expect": "ifname-mismatch", "target_s": 15},
    {"name": "nic-same-subnet", "args": ["--no-matrix"],
     "setup": _second_nic_in_subnet_on_node2, "expect": "nic-same-subnet", "target_s": 15},
    {"name": "nccl-auto-interface", "args": ["--no-matrix"], "setup": _ib0_decoy_on_node1,
     "expect": "nccl-auto-interface", "target_s": 15},
    {"name": "duplicate-address", "args": ["--no-matrix"], "setup": _same_docker0_everywhere,
     "per_node": {i: {"GLOO_SOCKET_IFNAME": "docker0"} for i in range(4)},
     "expect": "duplicate-address", "target_s": 15},
    {"name": "master-address-local", "args": ["--no-matrix"],
     "setup": _same_docker0_everywhere,
     "per_node": {i: {"MASTER_ADDR": "198.19.254.1"} for i in range(4)},
     "expect": "master-address-local", "expect_on": 1, "target_s": 15},
    {"name": "advertised-unreachable", "args": ["--no-matrix"],
     "setup": _node2_behind_vip_and_unreachable,
     "per_node": {2: {"MASTER_ADDR": "198.18.0.250"}},
     "expect": "advertised-unreachable", "target_s": 15},
    # kinds 4 and 7 through a router (each in its own lab of this shape: "lab" is passed to
    # Lab); the router's outer address is the last of 198.18.0.0/24
    {"name": "behind-nat", "args": ["--no-matrix"], "lab": {"behind": (1, 2)},
     "expect": "behind-nat", "target_s": 15},
    {"name": "advertised-unreachable-port-forward", "args": ["--no-matrix"],
     "lab": {"behind": (0,), "forwards": ((PORT, 0),)},
     "per_node": {i: {"MASTER_ADDR": "198.18.0.254"} for i in (1, 2, 3)},
     "expect": "advertised-unreachable", "target_s": 15},
    {"name": "behind-nat-on-rank0s-side", "args": ["--no-matrix"],
     "lab": {"behind": (0, 1), "forwards": ((PORT, 0),)},
     "per_node": {i: {"MASTER_ADDR": "198.18.0.254"} for i in (2, 3)},
     "expect": "behind-nat", "target_s": 15},
    # kind 6: the job's network (eth0, MASTER_ADDR's) shaped, a faster eth1 on every node
    {"name": "slower-network-chosen", "args": ["--no-matrix"],
     "lab": {"rate": "50mbit", "second_net": "198.18.3.0/24"},
     "expect": "slower-network-chosen", "target_s": 15},
    {"name": "routed-subnets-pass", "args": ["--no-matrix"],
     "lab": {"behind": (2, 3), "router": "routed"}, "expect": None, "target_s": 10},
]


def run_one(lab: Lab, sc: dict[str, Any]) -> dict[str, Any]:
    lab.clear()
    if "fault" in sc:
        kind, node, opts = sc["fault"]
        lab.fault(kind, node, **opts)
    stop = sc.get("setup", _none)(lab)
    try:
        runs = run_check(lab, sc["args"], nodes=sc.get("nodes"), port=PORT,
                         per_node=sc.get("per_node"), timeout=120)
    finally:
        if stop is not None:
            stop()
        lab.clear()
    on = sc.get("expect_on", 0)
    rec: dict[str, Any] = {"name": sc["name"], "target_s": sc["target_s"]}
    try:
        data = runs[on].json()
    except ValueError:
        data = {}
    ids = [c["id"] for c in data.get("causes", [])]
    rec["seconds"] = round(runs[on].seconds, 2)
    rec["exit_code"] = runs[on].returncode
    rec["causes"] = ids
    t = data.get("timings") or {}
    if "total" in t and "connect" in t:
        # rank 0's own time after its store is up (what ddpnet's stages cost); the rest is
        # python + torch start-up, which grows with the machine's load
        rec["after_store_up_s"] = round(t["total"] - t["connect"], 2)
        rec["rank0_startup_s"] = round(t["connect"], 2)
    if sc["expect"] is None:
        rec["named"] = data.get("verdict") == "pass"
        rec["stage_timings"] = data.get("timings")
        if data.get("bandwidth_gbps"):
            vals = [v for row in data["bandwidth_gbps"] for v in row if v is not None]
            rec["bandwidth_gbps_min_max"] = [min(vals), max(vals)]
    else:
        rec["named"] = sc["expect"] in ids
        rec["root_cause"] = ids[0] if ids else None
    rec["ok"] = bool(rec["named"]) and rec["seconds"] < sc["target_s"]
    return rec


def run_shaped(lab: Lab, sc: dict[str, Any]) -> dict[str, Any]:
    """A scenario in the shared lab, or in its own lab of the shape its "lab" names."""
    if "lab" not in sc:
        return run_one(lab, sc)
    shape: dict[str, Any] = {"nodes": 4, "rate": "1gbit", **sc["lab"]}
    with Lab(name=f"ckn{os.getpid()}", **shape) as own:
        return run_one(own, sc)


def torch_import_s() -> float:
    t = time.monotonic()
    subprocess.run([sys.executable, "-c", "import torch.distributed"], check=True,
                   capture_output=True)
    return round(time.monotonic() - t, 2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/check_speed.json"))
    ap.add_argument("--only", default=None, help="comma-separated scenario names")
    ap.add_argument("--warmup", type=int, default=1,
                    help="unrecorded healthy runs first (page cache, the doctor's torch probe "
                         "cache, ARP)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces)", file=sys.stderr)
        return 3
    load_before = os.getloadavg()[0]
    chosen = [s for s in SCENARIOS if not args.only or s["name"] in args.only.split(",")]
    results = []
    with Lab(name=f"ckb{os.getpid()}", nodes=4, rate="1gbit") as lab:
        for _ in range(args.warmup):
            run_one(lab, SCENARIOS[0])
        for sc in chosen:
            for _ in range(args.repeat):
                rec = run_shaped(lab, sc)
                results.append(rec)
                print(f"{rec['name']:22s} {rec['seconds']:6.2f} s (target < {rec['target_s']} s)"
                      f" named={rec['named']} causes={rec['causes']}", flush=True)
    out = {
        "benchmark": "check_speed",
        "lab": {"nodes": 4, "rate": "1gbit"},
        "measured": "seconds from the last rank starting to the verdict (rank 0's exit; for "
                    "master-port-filtered the blocked rank's own verdict)",
        "warmup_runs": args.warmup,
        "host": {"cpus": os.cpu_count(), "load_avg_1m_before": load_before,
                 "load_avg_1m_after": os.getloadavg()[0],
                 "python": platform.python_version(),
                 "torch_import_s": torch_import_s()},
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "results": results,
        "all_ok": all(r["ok"] for r in results),
    }
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}; all within target: {out['all_ok']}")
    return 0 if out["all_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
