"""Real gloo ranks of a script started by hand or through one launcher command, shared by
the watch's loopback tests (test_attach_gloo, test_dying_sigterm, test_dying_exit): each process in
a session of its own, killed whole if the test ends first."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ddpnet.local import local_environ
from ddpnet.net.ports import free_port

ROOT = str(Path(__file__).parents[2])
#: bounds a run that hangs; a healthy one takes seconds
RUN_TIMEOUT = 240


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str


def base_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDPNET_WATCH", "FAULT"))}
    env.update({"DDPNET_WATCH_DIR": str(tmp_path / "watch"), "STEPS": "6", "STEP_S": "0.01",
                "PYTHONPATH": os.pathsep.join([ROOT, env.get("PYTHONPATH", "")])})
    env.update(extra)
    return env


def wait_all(procs: list[subprocess.Popen[str]]) -> list[Ran]:
    ran = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=RUN_TIMEOUT)
            ran.append(Ran(p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    return ran


def ranks(argv: list[str], tmp_path: Path, world: int = 2, **extra: str) -> list[Ran]:
    """``world`` processes of ``argv`` started by hand (RANK, WORLD_SIZE, MASTER_* set)."""
    base, port = base_env(tmp_path, **extra), free_port()
    procs = [subprocess.Popen(argv, env=local_environ(base, r, world, port, cpus=2),
                              text=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, start_new_session=True)
             for r in range(world)]
    return wait_all(procs)


def one(argv: list[str], tmp_path: Path, **extra: str) -> Ran:
    proc = subprocess.Popen(argv, env=base_env(tmp_path, **extra), text=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    return wait_all([proc])[0]


def watched(ran: Ran) -> list[str]:
    return [line.split("watched ", 1)[1] for line in ran.out.splitlines() if "watched " in line]


