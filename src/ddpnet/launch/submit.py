"""``ddpnet sbatch``: render the script (pure, :mod:`ddpnet.launch.sbatch`), then the edge:
write it to a file, hand it to ``sbatch``.

``sbatch`` reads the script on stdin and its failures must be told apart (not installed,
controller not answering, job rejected), so this runs it directly rather than through
:func:`ddpnet.subproc.run_command`, which takes no input and folds those into "no answer".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddpnet.errors import ConfigError, RequirementError
from ddpnet.launch.sbatch import SbatchConfig, render
from ddpnet.subproc import run_tool

SUBMIT_TIMEOUT_S = 60


@dataclass(frozen=True)
class SbatchOptions:
    """The script to render; where to write it (None: stdout); whether to submit it."""

    config: SbatchConfig
    script_path: str | None = None
    submit: bool = False


@dataclass(frozen=True)
class SbatchResult:
    """The rendered script, where it was written, and the job id when it was submitted."""

    script: str
    script_path: str | None = None
    job_id: str | None = None
    exit_code: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"script": self.script, "script_path": self.script_path, "job_id": self.job_id}


def run(options: SbatchOptions) -> SbatchResult:
    text = render(options.config)
    if options.script_path:
        write_script(options.script_path, text)
    job = submit(text, options.script_path) if options.submit else None
    return SbatchResult(text, options.script_path, job)


def write_script(path: str, text: str) -> None:
    """The script at ``path``, executable (it can also be run by hand under salloc)."""
    Path(path).write_text(text)
    Path(path).chmod(0o755)


def submit(text: str, script_path: str | None) -> str:
    """``sbatch --parsable`` the file (or ``text`` on stdin); the job id it printed."""
    argv = ["sbatch", "--parsable"]
    if script_path:
        argv.append(script_path)
    proc = run_tool(argv, SUBMIT_TIMEOUT_S, input=None if script_path else text)
    if proc.failure == "absent":
        raise RequirementError("sbatch not found on PATH",
                               "install the SLURM client (apt-get install slurm-client) or "
                               "drop --submit and copy the script to a login node")
    if proc.failure == "timeout":
        raise RequirementError(f"sbatch did not answer within {SUBMIT_TIMEOUT_S} s",
                               "is slurmctld reachable? try: sinfo")
    if proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(f"sbatch rejected the job: {detail}",
                          "check the partition, time limit and node count with sinfo")
    return job_id(proc.stdout)


def job_id(stdout: str) -> str:
    """The job id ``sbatch --parsable`` printed (``1234`` or ``1234;cluster``)."""
    m = re.match(r"(\d+)", stdout.strip())
    if not m:
        raise ConfigError(f"sbatch printed no job id: {stdout.strip()!r}",
                          "submit the script by hand: sbatch job.sh")
    return m.group(1)
