"""What ddpnet adds on top of the engines, and how fast the SLURM test harnesses come up.

    .venv/bin/python benchmarks/launch_overhead.py [--runs 3] [--out FILE.json]

Measures (median of --runs, wall seconds): ``ddpnet launch --dry-run`` (resolution, interface
selection, rendering); a 2-rank torchrun job of an empty script started directly and through
``ddpnet launch`` (the difference is ddpnet's overhead); a private one-node SLURM cluster
(munged + slurmctld + slurmd) up and down; SLURM on a lab of 3 and 8 nodes (root only).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def timed(fn: Callable[[], object], runs: int) -> dict[str, float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return {"median_s": round(statistics.median(samples), 3), "min_s": round(min(samples), 3),
            "runs": runs}


def run(argv: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_"))}
    subprocess.run(argv, check=True, capture_output=True, env=env, timeout=300)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/launch_overhead.json"))
    args = ap.parse_args()
    py = sys.executable
    from ddpnet.net.ports import free_port

    with tempfile.TemporaryDirectory(prefix="ln-bench-") as tmp:
        script = Path(tmp) / "empty.py"
        script.write_text("import os\n")
        results: dict[str, object] = {
            "dry_run": timed(lambda: run([py, "-m", "ddpnet", "launch", "--dry-run",
                                          "--nproc-per-node", "2", "--", str(script)]),
                             args.runs),
        }
        # interleaved, so that load drifting on a shared machine hits both alike
        direct: list[float] = []
        ours: list[float] = []
        for _ in range(args.runs):
            for argv, samples in (
                    ([py, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                      "--master-port", str(free_port()), str(script)], direct),
                    ([py, "-m", "ddpnet", "launch", "--nproc-per-node", "2", "--master-port",
                      str(free_port()), "--", str(script)], ours)):
                start = time.perf_counter()
                run(argv)
                samples.append(time.perf_counter() - start)
        for key, samples in (("torchrun_direct_2_ranks", direct),
                             ("ddpnet_launch_2_ranks", ours)):
            results[key] = {"median_s": round(statistics.median(samples), 3),
                            "min_s": round(min(samples), 3), "runs": args.runs}
    has_slurm = shutil.which("slurmctld") or Path("/usr/sbin/slurmctld").exists()
    if os.geteuid() == 0 and has_slurm:
        from tests.slurm_util import start_local_cluster

        def local_cluster() -> None:
            c = start_local_cluster(prefix="ln-bench-slurm-")
            c.stop()
            shutil.rmtree(c.spec.root, ignore_errors=True)

        results["slurm_one_node_up_down"] = timed(local_cluster, args.runs)
        from ddpnet.lab import Lab
        from ddpnet.lab import slurm as labslurm

        for nodes in (3, 8):
            with Lab(name=f"lnb{os.getpid()}x{nodes}", nodes=nodes) as lab:
                def lab_slurm(lab: Lab = lab) -> None:
                    labslurm.start(lab)
                    labslurm.stop(lab.name)

                results[f"slurm_on_lab_{nodes}_nodes_up_down"] = timed(lab_slurm, args.runs)
    d, t = results["ddpnet_launch_2_ranks"], results["torchrun_direct_2_ranks"]
    assert isinstance(d, dict) and isinstance(t, dict)
    results["ddpnet_overhead_s"] = round(d["median_s"] - t["median_s"], 3)
    results["ddpnet_overhead_min_s"] = round(d["min_s"] - t["min_s"], 3)
    out = {"benchmark": "launch_overhead", "host": platform.node(), "cpus": os.cpu_count(),
           "load_avg_1m": round(os.getloadavg()[0], 2),
           "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "results": results}
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
