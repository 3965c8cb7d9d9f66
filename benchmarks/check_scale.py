"""How `ddpnet check --no-matrix` scales with the node count on lab namespaces (root required).

Target (issue #18): 32 nodes reach the verdict in < 20 s on the 2-core VM, every node's
start-up included (each node is its own `python -m ddpnet check` process, started at once).
Per node count N (default 4, 8, 16, 32) it records, over `--repeat` runs (medians):

- seconds to rank 0's verdict from the last node starting and from the first;
- rank 0's per-stage timings (the report's `timings`);
- the CPU seconds all nodes used (python start-up, the torch import, the doctor, the stages)
  and per node: on C cores the check cannot be faster than N x (CPU per node) / C;
- what each fact family costs to gather on one node (CPU and wall, measured in a node of
  that lab) and what each detector costs rank 0 to compare as N grows (real facts from the
  lab's nodes, cloned beyond the lab's size);
- one run with no node's torch facts cached (a first run, a fresh container's HOME): the
  same CPU per node, since the doctor takes them from the rank's own torch import;
- CPU count and load average before and after (the VM is shared: read the figures with it).

ddpnet's own sources are byte-compiled first (as `pip install` leaves them): with
PYTHONDONTWRITEBYTECODE=1 (set on the dev VM) every node would otherwise compile ~110
modules at each start (~0.1 s of CPU per node). Writes benchmarks/results/check_scale.json.

    sudo .venv/bin/python benchmarks/check_scale.py [--nodes 4,8,16,32] [--repeat 3]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.check.labcheck import node_env  # noqa: E402

import ddpnet  # noqa: E402
from ddpnet.lab import Lab  # noqa: E402

PORT = 29530
TARGET_S = {32: 20.0}

#: run inside one lab node: what each fact family costs to gather there (JSON on stdout);
#: with "--torch" also the torch import and the GPU facts that need it
GATHER = r"""
import json, os, resource, sys, time
costs, facts = {}, {}

def cpu():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime

def timed(name, fn):
    c, w = cpu(), time.monotonic()
    out = fn()
    costs[name] = {"cpu_s": round(cpu() - c, 4), "wall_s": round(time.monotonic() - w, 4)}
    return out

env = dict(os.environ)
from ddpnet.env.resolve import resolve
cfg = resolve(env)
from ddpnet.check.containers import netns_id
from ddpnet.check.gpu import nccl_facts
from ddpnet.check.nics import nic_facts
from ddpnet.check.stages import facts as F
from ddpnet.doctor.base import Host
from ddpnet.doctor.run import REGISTRY, build_inputs, real_host, run_checks, run_doctor
from ddpnet.net.interfaces import list_interfaces
from ddpnet.net.select import select_for_host

sel = timed("selection (interfaces, MASTER_ADDR, route)", lambda: select_for_host(cfg, env))
table = timed("interface table", list_interfaces)
facts.update(F.selection_facts(sel)); facts.update(F.interface_facts(sel, table))
facts.update(timed("nccl variables and config files", lambda: nccl_facts(env)))
facts.update(timed("library picks and interface addresses",
                   lambda: F.binding_facts(env, table)))
facts.update(timed("NICs (subnets, rp_filter, arp sysctls)",
                   lambda: nic_facts(table, sel.gloo.source, sel.gloo.reason, Host().sysctl)))
facts["netns"] = timed("network namespace id", netns_id)
host = real_host(env)
inputs, _ = timed("doctor inputs (config, interfaces, route)",
                  lambda: build_inputs(host, None, None, None, cfg))
for family, checks in REGISTRY.items():
    timed(f"doctor {family}", lambda: run_checks(host, inputs, checks, prefetch=False))
report = timed("doctor, all families at once (what check runs)",
               lambda: run_doctor(cfg=cfg, environ=env))
facts.update({k: v for k, v in dict(report.facts).items() if v is not None})
facts.update(F.selection_facts(sel))
facts["doctor"] = F.doctor_summary(report.checks)
facts["names"] = timed("names (MASTER_ADDR, rank 0's hostname)",
                       lambda: F.name_facts(cfg.master_addr, sys.argv[1], cfg.launcher))
facts["own_addresses"] = timed("own addresses (rank 0)", F.own_addresses)
facts.update({"address": sel.address, "interface": str(sel.interface), "mesh_port": 40000,
              "mtu_port": 40001, "clock_offset_s": 0.0, "hostname": os.uname().nodename})
if "--torch" in sys.argv:
    from ddpnet.check.torchimport import import_torch, own_process
    own_process()
    timed("torch import (lean, as a rank does it)", import_torch)
    from ddpnet.check.gpu import gpu_facts
    facts.update(timed("GPU facts (torch.cuda, NVML)", lambda: gpu_facts(0)))
print(json.dumps({"costs": costs, "facts": facts}, default=str))
"""


def _cpu_children() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _machine_cpu() -> tuple[float, float]:
    """(busy, idle) CPU seconds of the whole machine since boot (/proc/stat)."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    idle = ticks[3] + ticks[4]  # idle + iowait
    return (sum(ticks[:8]) - idle) / hz, idle / hz


def run_once(lab: Lab, n: int, extra: dict[str, str] | None = None) -> dict[str, Any]:
    """Start `ddpnet check --json --no-matrix` on every node at once; rank 0's verdict."""
    cpu0, load0, (busy0, idle0) = _cpu_children(), os.getloadavg()[0], _machine_cpu()
    procs: list[subprocess.Popen[str]] = []
    first = time.monotonic()
    for i in range(n):
        env = node_env(lab, i, rank=i, world=n, port=PORT, extra=extra)
        procs.append(lab.popen(i, [sys.executable, "-m", "ddpnet", "check", "--json",
                                   "--no-matrix"], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True))
    last = time.monotonic()
    ends: dict[int, float] = {}
    outs: dict[int, str] = {}

    def wait(i: int, p: subprocess.Popen[str]) -> None:
        try:
            outs[i] = p.communicate(timeout=180)[0]
        except subprocess.TimeoutExpired:
            p.kill()
            outs[i] = p.communicate()[0]
        ends[i] = time.monotonic()

    threads = [threading.Thread(target=wait, args=(i, p)) for i, p in enumerate(procs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        data = json.loads(outs[0])
    except ValueError:
        data = {}
    cpu = _cpu_children() - cpu0
    busy1, idle1 = _machine_cpu()
    busy, idle = busy1 - busy0, idle1 - idle0
    timings = data.get("timings") or {}
    return {
        "verdict": data.get("verdict"), "causes": [c["id"] for c in data.get("causes", [])],
        "cause_details": [f"{c['id']}: {c.get('detail', '')}"[:400]
                          for c in data.get("causes", [])],
        "exit_code": procs[0].returncode,
        "from_last_start_s": round(ends[0] - last, 2),
        "from_first_start_s": round(ends[0] - first, 2),
        "spawn_spread_s": round(last - first, 3),
        "after_store_up_s": round(timings["total"] - timings["connect"], 2)
        if "total" in timings and "connect" in timings else None,
        "stage_timings": {k: round(v, 3) for k, v in timings.items()},
        "cpu_s_all_nodes": round(cpu, 2), "cpu_s_per_node": round(cpu / n, 3),
        # no check of these N nodes can end sooner on this machine's cores, whatever the load
        "cpu_floor_s": round(cpu / (os.cpu_count() or 1), 2),
        # the machine's CPU meanwhile: what other processes (other sessions) took, and what
        # stayed idle (idle ~0 and others > 0: the verdict waited for CPU they held)
        "others_cpu_s": round(max(0.0, busy - cpu), 2), "idle_cpu_s": round(idle, 2),
        "load_avg_1m_before": load0, "load_avg_1m_after": os.getloadavg()[0],
    }


def gather_costs(lab: Lab, n: int, node: int, torch: bool) -> dict[str, Any]:
    env = node_env(lab, node, rank=node, world=n, port=PORT)
    argv = [sys.executable, "-c", GATHER, lab.nodes[0].hostname, *(["--torch"] if torch else [])]
    out = lab.exec(node, argv, env=env, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"gathering on node {node} failed: {out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def lab_facts(lab: Lab, n: int) -> list[dict[str, Any]]:
    """Every node's facts (no torch), gathered 8 nodes at a time."""
    got: dict[int, dict[str, Any]] = {}
    nodes = list(range(n))
    for start in range(0, n, 8):
        batch = nodes[start:start + 8]
        threads = [threading.Thread(target=lambda i=i: got.__setitem__(
            i, gather_costs(lab, n, i, torch=False)["facts"])) for i in batch]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return [got[i] for i in nodes]


def clone_facts(real: Sequence[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """``n`` ranks' facts: the lab's own, and beyond the lab's size copies of its workers'
    (never rank 0's: its names resolve to itself) with another hostname and address
    (198.18.x.y), so that a healthy cluster stays healthy and nothing groups that should not."""
    out = [dict(f) for f in real[:n]]
    workers = real[1:] or real
    for r in range(len(out), n):
        base = workers[r % len(workers)]
        addr = f"198.{18 + r // 65000}.{r // 250 % 256}.{r % 250 + 1}"
        own = re.compile(r"(?<![\d.])" + re.escape(str(base.get("address"))) + r"(?![\d])")
        text = own.sub(addr, json.dumps(base))
        text = text.replace(json.dumps(str(base.get("hostname"))), json.dumps(f"clone{r}"))
        out.append(json.loads(text))
    return out


def detectors() -> list[tuple[str, Callable[[Any], Any]]]:
    """Rank 0's comparisons of the facts stage, each over every rank's facts (those that
    exist in this tree: other detectors may be added beside them)."""
    from ddpnet.check import compare, containers, gpu, ifvars, nics

    named = [(compare, "compare_selection"), (compare, "compare_names"),
             (compare, "compare_network"), (compare, "compare_versions"),
             (compare, "compare_mtu"), (compare, "compare_clock"),
             (ifvars, "compare_picks"), (nics, "compare_nics"),
             (containers, "compare_addresses")]
    out: list[tuple[str, Callable[[Any], Any]]] = [
        (name, getattr(mod, name)) for mod, name in named if hasattr(mod, name)]
    out.append(("compare_doctor", lambda nodes: compare.compare_doctor(nodes, set())))
    out.append(("compare_gpus", lambda nodes: gpu.compare_gpus(nodes, "gloo")))
    out.append(("compare_facts (all of compare.py)", compare.compare_facts))
    return out


def compare_costs(real: Sequence[dict[str, Any]], sizes: Sequence[int]
                  ) -> dict[str, dict[str, Any]]:
    """Seconds (median of 5) each detector takes on rank 0 for N ranks' facts (a healthy
    cluster: ``causes`` says what compare.py found in them, [] when the clones are sound)."""
    from ddpnet.check import compare
    from ddpnet.check.compare import NodeFacts

    out: dict[str, dict[str, Any]] = {}
    for n in sizes:
        nodes = [NodeFacts(r, f) for r, f in enumerate(clone_facts(real, n))]
        row: dict[str, Any] = {"causes": sorted({c.id for c in compare.compare_facts(nodes)})}
        for name, fn in detectors():
            runs = []
            for _ in range(5):
                t = time.perf_counter()
                fn(nodes)
                runs.append(time.perf_counter() - t)
            row[name] = round(statistics.median(runs), 6)
        out[str(n)] = row
    return out


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("from_last_start_s", "from_first_start_s", "after_store_up_s", "cpu_s_all_nodes",
            "cpu_s_per_node", "cpu_floor_s", "others_cpu_s", "idle_cpu_s", "load_avg_1m_before")
    med = {k: round(statistics.median(r[k] for r in runs if r[k] is not None), 3)
           for k in keys if any(r[k] is not None for r in runs)}
    stages = sorted({s for r in runs for s in r["stage_timings"]})
    med["stage_timings"] = {s: round(statistics.median(
        r["stage_timings"][s] for r in runs if s in r["stage_timings"]), 3) for s in stages}
    return med


def measure(n: int, repeat: int, warmup: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    with Lab(name=f"cks{os.getpid() % 10000}", nodes=n, rate="1gbit") as lab:
        for _ in range(warmup):
            run_once(lab, n)
        runs = []
        for _ in range(repeat):
            rec = run_once(lab, n)
            runs.append(rec)
            print(f"N={n:3d} {rec['verdict']} {rec['from_last_start_s']:6.2f} s from the last "
                  f"start ({rec['from_first_start_s']:.2f} from the first), "
                  f"{rec['cpu_s_per_node']:.2f} CPU-s/node, others {rec['others_cpu_s']:.1f} "
                  f"CPU-s, idle {rec['idle_cpu_s']:.1f} CPU-s, load "
                  f"{rec['load_avg_1m_before']:.1f} -> {rec['load_avg_1m_after']:.1f}", flush=True)
        gathered = gather_costs(lab, n, 1, torch=True)
        facts = lab_facts(lab, n)
        with tempfile.TemporaryDirectory() as empty:  # no node has its torch facts cached
            cold = run_once(lab, n, {"XDG_CACHE_HOME": empty})
    entry = {"nodes": n, "median": median_of(runs), "runs": runs,
             "all_pass": all(r["verdict"] == "pass" for r in runs),
             "cold_cache_run": cold, "per_node_gather": gathered["costs"]}
    if n in TARGET_S:
        entry["target_s"] = TARGET_S[n]
        entry["within_target"] = entry["median"]["from_last_start_s"] < TARGET_S[n]
    return entry, facts


def torch_import_cpu_s() -> dict[str, float]:
    """CPU seconds of a bare interpreter, a plain torch import and the check's lean one."""
    lean = ("from ddpnet.check.torchimport import import_torch, own_process; "
            "own_process(); import_torch()")
    out = {}
    for name, code in (("python", "pass"), ("import torch", "import torch.distributed"),
                       ("lean torch import (check)", lean)):
        runs = []
        for _ in range(3):
            before = _cpu_children()
            subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
            runs.append(_cpu_children() - before)
        out[name] = round(statistics.median(runs), 3)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", default="4,8,16,32", help="comma-separated node counts")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1, help="unrecorded runs per node count")
    ap.add_argument("--compare-sizes", default="4,8,16,32,64,128,256,1024",
                    help="rank counts for rank 0's detector costs (facts cloned beyond the lab)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/check_scale.json"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces)", file=sys.stderr)
        return 3
    package = Path(ddpnet.__file__).parent
    compileall.compile_dir(str(package), quiet=1)  # as pip install leaves it
    load_before = os.getloadavg()
    entries, facts = [], []
    for n in (int(x) for x in args.nodes.split(",")):
        entry, got = measure(n, args.repeat, args.warmup)
        entries.append(entry)
        facts = got if len(got) > len(facts) else facts
    out = {
        "benchmark": "check_scale",
        "command": "ddpnet check --json --no-matrix on every node of a 1 Gbit/s lab, all "
                   "started at once (one interpreter per node)",
        "measured": "from_last_start_s: last node started -> rank 0's exit (its verdict); "
                    "cpu_s: CPU of every node's processes and their children; cpu_floor_s: "
                    "cpu_s_all_nodes / cpus, the least time N nodes' CPU needs on these cores "
                    "(the verdict on an idle machine is that plus the stages' waits)",
        "host": {"cpus": os.cpu_count(), "load_avg_before": load_before,
                 "load_avg_after": os.getloadavg(), "python": platform.python_version(),
                 "bytecode": "ddpnet byte-compiled (as pip install leaves it)",
                 "cpu_s": torch_import_cpu_s()},
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "repeat": args.repeat, "warmup": args.warmup,
        "scale": entries,
        "rank0_compare_s": compare_costs(facts, [int(x) for x in
                                                 args.compare_sizes.split(",")]),
    }
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")
    for e in entries:
        print(f"N={e['nodes']:3d}: {e['median']['from_last_start_s']:.2f} s median, "
              f"{e['median']['cpu_s_per_node']:.2f} CPU-s per node, CPU floor "
              f"{e['median']['cpu_floor_s']:.2f} s")
    return 0 if all(e.get("within_target", True) and e["all_pass"] for e in entries) else 1


if __name__ == "__main__":
    sys.exit(main())
