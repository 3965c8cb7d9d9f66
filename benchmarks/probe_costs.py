"""CPU per probe of one rank in ``check``'s reachability stage: what a simulated rank of
``scale_sim.py`` costs its 2 cores, and so why 4,096 single-rank hosts do not fit (issue 31).

    sudo .venv/bin/python benchmarks/probe_costs.py [--repeat 30] [--json]

One lab node (its own network namespace, its lab address): a rank's listener and UDP echo,
and the real probes against them, each run ``--repeat`` times; the CPU of this process and
its children (both ends of every probe, the ``ip`` processes) per call, and the wall time.
Writes ``benchmarks/results/probe_costs.json``. Needs root (network namespaces).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def cpu_s() -> float:
    """CPU seconds of this process and its waited-for children."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), \
        resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def measure(call: Callable[[], object], repeat: int) -> dict[str, float]:
    """CPU and wall milliseconds per call (after one unrecorded call)."""
    call()
    cpu, wall = cpu_s(), time.monotonic()
    for _ in range(repeat):
        call()
    return {"cpu_ms": round(1000 * (cpu_s() - cpu) / repeat, 2),
            "wall_ms": round(1000 * (time.monotonic() - wall) / repeat, 2)}


def inside(address: str, repeat: int) -> dict[str, Any]:
    """The measurements, in the lab node (its namespace, ``address`` on its eth0)."""
    from ddpnet.check import loss, mesh, paths, pmtu, tournament
    from ddpnet.check.stages.reachability import RING_BW_S, RING_MOST, RING_ROUND
    from ddpnet.doctor.base import Host

    listener = mesh.Listener(address)
    sysctl = Host().sysctl
    probes: dict[str, tuple[str, Callable[[], object], int]] = {
        "loss": (f"loss.probe_peer: {loss.COUNT} datagrams and the marker, echoed",
                 lambda: loss.probe_peer(address, listener.echo.port), repeat),
        "path_mtu": ("pmtu.probe_peer at MTU 1500 (sizes 1280..1500, DF set)",
                     lambda: pmtu.probe_peer(address, listener.echo.port, 1500), repeat),
        "mesh_connect": ("mesh.probe: one TCP connect, hello, the listener's answer",
                         lambda: mesh.probe(address, listener.port, 2.0, 0), repeat),
        "kernel_paths": ("paths.gather for one subnet: two `ip route get`, sysctls",
                         lambda: paths.gather(address, "eth0", {"s": address}, sysctl),
                         repeat),
        "ring_stream": (f"tournament.send_stream for {RING_BW_S:g} s or {RING_MOST >> 20} MB "
                        "(both ends)",
                        lambda: tournament.send_stream(
                            address, listener.port, RING_ROUND, 0, seconds=RING_BW_S,
                            chunk=1 << 16, most=RING_MOST, drain=True, timeout=10.0),
                        max(3, repeat // 3)),
    }
    out = {name: {"what": what, "calls": n, **measure(call, n)}
           for name, (what, call, n) in probes.items()}
    listener.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--inside", help=argparse.SUPPRESS)  # the lab node's address
    args = ap.parse_args()
    if args.inside:
        print(json.dumps(inside(args.inside, args.repeat)))
        return 0
    from ddpnet.lab import Lab

    with Lab(name=f"pc{os.getpid() % 10000}", nodes=1) as lab:
        load = os.getloadavg()[0]
        run = lab.exec(0, [sys.executable, str(Path(__file__).resolve()), "--inside",
                           lab.node(0).address, "--repeat", str(args.repeat)], timeout=600,
                       env={"PYTHONPATH": str(ROOT / "src")})
    if run.returncode != 0:
        print(f"probe_costs: the lab node's run failed ({run.returncode}): "
              f"{run.stderr.strip()[-500:]}", file=sys.stderr)
        return 1
    probes = json.loads(run.stdout.strip().splitlines()[-1])
    result = {"benchmark": "probe_costs", "repeat": args.repeat,
              "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "host": platform.node(), "cpus": os.cpu_count(), "loadavg_before": load,
              "loadavg_after": os.getloadavg()[0], "probes": probes}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "probe_costs.json").write_text(json.dumps(result, indent=1) + "\n")
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for name, p in probes.items():
            print(f"{name:13s} {p['cpu_ms']:8.2f} CPU-ms  {p['wall_ms']:8.2f} ms  {p['what']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
