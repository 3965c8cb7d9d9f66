"""Run ``ddpnet check`` on lab nodes with per-node environments (shared by the lab tests and
benchmarks/check_speed.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ddpnet.lab import Lab
from tests import zygote

#: launcher variables the test runner must not leak into a node
_CLEAR = ("SLURM_JOB_ID", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
          "TORCHELASTIC_RUN_ID", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME",
          "LOCAL_RANK", "LOCAL_WORLD_SIZE")


#: windows for a check that must not wait one: a rank that waited instead of going on at once
#: takes at least JOIN_S, however loaded the machine, and one that did not stays under
#: UNWAITED_S (fixed "< 15 s" bounds against a 10 s join window and 20 s stages failed at
#: 15.7 s and 16.9 s on two loaded cores in CI: slow start-ups, not waits)
JOIN_S = 30
UNWAITED_S = JOIN_S
UNWAITED = ["--join-timeout", str(JOIN_S), "--timeout", str(JOIN_S + 10), "--no-matrix"]
#: rank 0's own window where a test means it to wait for a missing rank (appended to
#: UNWAITED for that rank alone: the last value of an option wins)
SHORT_JOIN = ["--join-timeout", "10"]


@dataclass(frozen=True)
class RankRun:
    node: int
    returncode: int
    stdout: str
    stderr: str
    #: seconds from the last rank starting to this rank's exit
    seconds: float

    def json(self) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(self.stdout)
        return out


def node_env(lab: Lab, node: int, *, rank: int, world: int, port: int,
             extra: Mapping[str, str] | None = None, drop: Sequence[str] = ()
             ) -> dict[str, str]:
    # blank only what the runner really has (lab.popen cannot unset a variable)
    env = {k: "" for k in _CLEAR if k in os.environ}
    env.update({"RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": lab.master_addr,
                "MASTER_PORT": str(port), "NNODES": str(world), "NODE_RANK": str(rank),
                "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "PYTHONWARNINGS": "ignore"})
    env.update(extra or {})
    for key in drop:  # left unset (not in the runner's environment either)
        env.pop(key, None)
    return env


def run_check(lab: Lab, args: Sequence[str], *, nodes: Sequence[int] | None = None,
              port: int = 29510, per_node: Mapping[int, Mapping[str, str]] | None = None,
              timeout: float = 90, drop: Sequence[str] = (),
              per_node_args: Mapping[int, Sequence[str]] | None = None
              ) -> dict[int, RankRun]:
    """Start ``ddpnet check --json ARGS`` on each chosen node (rank = node index unless
    ``per_node`` says otherwise; ``per_node_args`` appended on that node), wait for all
    (bounded), return each rank's output."""
    chosen = list(range(len(lab.nodes))) if nodes is None else list(nodes)
    world = len(lab.nodes)
    procs: dict[int, subprocess.Popen[str]] = {}
    for idx in chosen:
        env = node_env(lab, idx, rank=idx, world=world, port=port,
                       extra=(per_node or {}).get(idx), drop=drop)
        # forked from the test zygote inside the node (tests/zygote.py): torch imported once
        procs[idx] = zygote.node_popen(
            lab, idx, ["-m", "ddpnet", "check", "--json", *args,
                       *(per_node_args or {}).get(idx, ())],
            env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return wait_all(procs, timeout)


def wait_all(procs: Mapping[int, subprocess.Popen[str]], timeout: float) -> dict[int, RankRun]:
    """Wait for every process at once (each killed at ``timeout``); each one's output and
    seconds from now to its exit, by index."""
    started = time.monotonic()
    out: dict[int, RankRun] = {}

    def wait(idx: int, proc: subprocess.Popen[str]) -> None:
        try:
            so, se = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:  # lab.popen starts each in its own session: its children (torchrun's
                os.killpg(proc.pid, signal.SIGKILL)  # workers) hold the pipes too
            except OSError:
                proc.kill()
            so, se = proc.communicate()
        out[idx] = RankRun(idx, proc.returncode, so, se, time.monotonic() - started)

    threads = [threading.Thread(target=wait, args=item) for item in procs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return dict(sorted(out.items()))
