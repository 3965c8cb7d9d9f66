"""Run an engine as a child: signals forwarded, its exit code returned (edge)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from types import FrameType

from ddpnet.errors import RequirementError

#: signals a scheduler or a user sends that the engine must see (SLURM sends SIGUSR1/SIGTERM
#: before a time limit; torchrun turns SIGTERM into a clean worker shutdown)
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


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

    forwarded: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        if child.poll() is None:
            forwarded.append(signum)
            child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    try:
        while True:
            try:
                code = child.wait()
                break
            except InterruptedError:  # pragma: no cover - PEP 475 retries already
                continue
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if code < 0:
        return 128 - code
    if code != 0 and forwarded:
        name = signal.Signals(forwarded[-1]).name
        sys.stderr.write(f"ddpnet: {argv[0]} stopped after {name} (forwarded to it); "
                         f"exit {128 + forwarded[-1]}\n")
        return 128 + forwarded[-1]
    return code


def _package(tool: str) -> str:
    return {"mpirun": "apt-get install openmpi-bin", "sbatch": "apt-get install slurm-client",
            "srun": "apt-get install slurm-client"}.get(tool, f"the package providing {tool}")
