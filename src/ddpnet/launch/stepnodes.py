"""``python -m ddpnet.launch.stepnodes --job-dir DIR --nodes N``: the nodes a step of a job
with spare nodes runs on, comma-separated (edge): the allocation's (SLURM_JOB_NODELIST)
first N in order that the job's recovery record has not taken out. The batch script of
``ddpnet sbatch --spare-nodes`` asks it before each (re)start of its step."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ddpnet.errors import DdpnetError
from ddpnet.launch.recover import read_record, record_path
from ddpnet.launch.recovery import step_nodes


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddpnet.launch.stepnodes")
    parser.add_argument("--job-dir", type=Path, required=True)
    parser.add_argument("--nodes", type=int, required=True)
    args = parser.parse_args(argv)
    from ddpnet.env.hostlist import expand

    try:
        nodelist = os.environ.get("SLURM_JOB_NODELIST", "")
        allocation = expand(nodelist, "SLURM_JOB_NODELIST") if nodelist else ()
        taken_out = read_record(record_path(args.job_dir)).taken_out
    except (DdpnetError, ValueError, OSError) as exc:
        sys.stderr.write(f"ddpnet: stepnodes: error: {exc}\n"
                         "hint: run inside the job's batch script (SLURM_JOB_NODELIST set) "
                         "with its DDPNET_JOB_DIR\n")
        return 2
    chosen = step_nodes(allocation, taken_out, args.nodes)
    if not chosen:
        sys.stderr.write(f"ddpnet: stepnodes: error: the allocation ({nodelist or 'none'}) has "
                         f"fewer than {args.nodes} nodes left without "
                         f"{', '.join(taken_out) or 'any taken out'}\n"
                         "hint: resubmit the job; `ddpnet diagnose --job-dir "
                         f"{args.job_dir}` shows which nodes were taken out and why\n")
        return 1
    print(",".join(chosen))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
