"""Run an engine as a child: signals forwarded, its exit code returned (edge)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ddpnet.errors import RequirementError
from ddpnet.local import exit_status, forwarding


def _send(child: subprocess.Popen[Any], signum: int) -> None:
    """The engine shares our process group (a terminal's Ctrl-C reaches it too); torchrun and
    mpirun pass a signal on to their own workers."""
    if child.poll() is None:
        child.send_signal(signum)


def run(argv: Sequence[str], env: Mapping[str, str]) -> int:
    """Start ``argv`` with ``os.environ`` plus ``env``, forward signals, return its status.

    A child killed by signal N returns 128+N, as a shell reports it; so does a child that
    fails after we forwarded it signal N (torchrun exits 1 on SIGTERM), so that a scheduler
    sees why the job ended.
    """
    merged = dict(os.environ)
    merged.update(env)
    try:
        child = subprocess.Popen(list(argv), env=merged)
    except FileNotFoundError:
        raise RequirementError(
            f"{argv[0]} not found on PATH", f"install it (e.g. {_package(argv[0])})"
        ) from None

    with forwarding(lambda: [child], send=_send) as forwarded:
        code = child.wait()
    if code < 0:
        return exit_status(code)
    if code != 0 and forwarded:
        name = signal.Signals(forwarded[-1]).name
        sys.stderr.write(f"ddpnet: {argv[0]} stopped after {name} (forwarded to it); "
                         f"exit {128 + forwarded[-1]}\n")
        return 128 + forwarded[-1]
    return code


def _package(tool: str) -> str:
    return {"mpirun": "apt-get install openmpi-bin", "sbatch": "apt-get install slurm-client",
            "srun": "apt-get install slurm-client"}.get(tool, f"the package providing {tool}")
