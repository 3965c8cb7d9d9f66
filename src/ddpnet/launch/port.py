"""``python -m ddpnet.launch.port [JOB_ID]``: the job's rendezvous port, for batch scripts
(computed once on the first node and exported, so every node agrees)."""

from __future__ import annotations

import os
import sys

from ddpnet.env.jobport import derive_port, read_port_range


def main(argv: list[str]) -> int:
    job = argv[0] if argv else os.environ.get("SLURM_JOB_ID", "")
    if not job:
        sys.stderr.write("ddpnet: error: no job id (SLURM_JOB_ID unset)\n"
                         "hint: run inside a SLURM job or pass the job id\n")
        return 2
    print(derive_port(job, read_port_range()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
