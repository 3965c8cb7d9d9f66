"""A tiny DDP training script with one fault, for the watch's real-process tests and its
benchmark: ``python scenario.py MODE`` where MODE is ok, stop, kill, skip, shape, sleepdata,
slow, desync (skips a same-sized all_reduce: nothing hangs), dtype (float32[2] for float64[1]),
extra (one more all_reduce after the loop), checkpoint (rank 0 saves for CHECKPOINT_S = 20 s
at steps 10, 30, ...: healthy, no alarm) or ckpt (rank 0 spends ``CKPT_S`` seconds in
``ddpnet.phase("checkpoint")`` every ``CKPT_EVERY`` steps; no fault); SCENARIO_BACKEND picks
the backend (nccl: on cuda:0); rank ``FAULT_RANK`` (default 1) misbehaves at step
``FAULT_STEP`` (default 5) (slow: from
that step on, every optimizer step takes ``SLOW_S`` seconds longer: the others wait in the
all_reduce after it; gloo's Flight Recorder has no end time for DDP's own bucket all-reduces,
so a wait inside backward would not be measured there).

:func:`run_job` runs N such ranks on loopback and returns how each ended."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import ddpnet
from ddpnet.watch.session import ports as watch_ports
from ddpnet.watch.session import threshold as watch_threshold


def main(mode: str) -> None:
    timeout = os.environ.get("WATCH_TIMEOUT", "4")  # "": the default settings
    handle = ddpnet.init(os.environ.get("SCENARIO_BACKEND", "auto"),
                         watch_timeout=float(timeout) if timeout else None)
    device = torch.device(handle.device)
    print(f"pid {os.getpid()}", flush=True)
    print(f"watching {handle.watching} fr {os.environ.get('TORCH_FR_BUFFER_SIZE')}", flush=True)
    print(f"ports {json.dumps(watch_ports())}", flush=True)
    faulty = handle.rank == int(os.environ.get("FAULT_RANK", "1"))
    ckpt_every = int(os.environ.get("CKPT_EVERY", "200"))
    fault_step = int(os.environ.get("FAULT_STEP", "5"))
    known_to_the_hub(faulty and handle.watching)
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(16, 4).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(int(os.environ.get("STEPS", "40"))):
        fault = faulty and step == fault_step
        if fault:
            print(f"fault {mode} {time.time()} {os.getpid()}", flush=True)
        ddpnet.step(step)
        with ddpnet.phase("data"):
            x = torch.randn(8, 16, device=device)
            if fault and mode == "sleepdata":
                time.sleep(600)
        with ddpnet.phase("forward"):
            loss = model(x).sum()
        with ddpnet.phase("backward"):
            loss.backward()
        with ddpnet.phase("step"):
            if faulty and mode == "slow" and step >= fault_step:
                time.sleep(float(os.environ.get("SLOW_S", "0.1")))
            opt.step()
            opt.zero_grad()
        if handle.rank == 0:
            save(mode, step, ckpt_every)
        if fault and mode in ("stop", "kill"):
            os.kill(os.getpid(), signal.SIGSTOP if mode == "stop" else signal.SIGKILL)
        if not (fault and mode in ("skip", "desync")):
            dist.all_reduce(_metric(mode, fault).to(device))
        time.sleep(0.02)
        if step % 20 == 0:  # with the threshold this rank would judge itself by
            print(f"step {step} {(watch_threshold() or {}).get('source', 'unwatched')}",
                  flush=True)
    if faulty and mode == "extra":
        print(f"fault {mode} {time.time()}", flush=True)
        dist.all_reduce(_metric(mode, False).to(device))
    print("finished", flush=True)
    ddpnet.shutdown()


def known_to_the_hub(wait: bool) -> None:
    """The fault once the hub knows this rank: forked from the zygote, a rank reaches step 5
    in 0.1 s, before its heartbeat's background connect is done (named "rank 1 (?): never
    published its state")."""
    from ddpnet.watch import session

    if wait and session._session is not None:
        if session._session.connecting is not None:
            session._session.connecting.join(60)
        session._session.beacon.known.wait(30)


def save(mode: str, step: int, ckpt_every: int) -> None:
    """Rank 0's saves: ``checkpoint`` for CHECKPOINT_S at steps 10, 30, ...; ``ckpt`` every
    ``ckpt_every`` steps (:func:`checkpoint`)."""
    if mode == "checkpoint" and step % 20 == 10:
        with ddpnet.phase("checkpoint"):  # rank 0 saves; the others wait in the next call
            time.sleep(float(os.environ.get("CHECKPOINT_S", "20")))
    elif mode == "ckpt" and step and step % ckpt_every == 0:
        checkpoint(step)


def checkpoint(step: int) -> None:
    """Rank 0 "saves a checkpoint" for ``CKPT_S`` seconds while the others wait in the next
    all_reduce, inside ``ddpnet.phase("checkpoint")`` (its own allowance)."""
    print(f"threshold {step} {json.dumps(watch_threshold())}", flush=True)
    with ddpnet.phase("checkpoint"):
        time.sleep(float(os.environ.get("CKPT_S", "20")))
    print(f"saved {step} {time.time()}", flush=True)


def _metric(mode: str, fault: bool) -> torch.Tensor:
    """The tensor of the step's own all_reduce. desync: as large as DDP's one gradient bucket
    (68 floats), so a rank that skips it pairs its next bucket with the others' metric and
    nothing aborts; dtype: float64[1], and the faulty rank's float32[2] has the same 8 bytes."""
    if mode == "desync":
        return torch.ones(68)
    if mode == "dtype":
        return torch.ones(2) if fault else torch.ones(1, dtype=torch.float64)
    return torch.ones(7 if fault and mode == "shape" else 1)


@dataclass
class Job:
    codes: dict[int, int]
    stderr: dict[int, str]
    stdout: dict[int, str]
    fault_at: float | None
    rank0_exit: float | None
    report_at: float | None  # when the hub wrote report.json (the cause named)
    left: list[int]  # pids still running afterwards (ranks or the hub): must be empty


def _hubs(token: str) -> list[int]:
    import psutil

    out = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or ())
        if "ddpnet.watch.hub" in cmd and token in cmd:
            out.append(proc.pid)
    return out


def start_job(mode: str, directory: str, *, world: int = 2, watch_timeout: float = 4,
              extra: dict[str, str] | None = None,
              script: str = __file__) -> tuple[list[Any], int]:
    """``world`` ranks of this script (or ``script``, run as ``script MODE``) on loopback,
    each in a session of its own."""
    import subprocess

    from ddpnet.local import local_environ
    from ddpnet.net.ports import free_port

    port = free_port()
    env = {**os.environ, "DDPNET_WATCH_DIR": directory, "WATCH_TIMEOUT": str(watch_timeout),
           **(extra or {})}
    from tests import zygote

    procs = [zygote.popen([script, mode], text=True,
                              env=local_environ(env, r, world, port, cpus=2),
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, start_new_session=True)
             for r in range(world)]
    return procs, port


def leftovers(procs: list[Any], port: int, world: int, patience: float = 10) -> list[int]:
    """Pids of ranks or this job's hub still running after ``patience``; they are killed."""
    token = f"127.0.0.1:{port}:{world}"
    end = time.monotonic() + patience
    while (_hubs(token) or any(p.poll() is None for p in procs)) and time.monotonic() < end:
        time.sleep(0.2)
    left = [p.pid for p in procs if p.poll() is None] + _hubs(token)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


def run_job(mode: str, directory: str, *, world: int = 2, timeout: float = 120,
            watch_timeout: float = 4, extra: dict[str, str] | None = None,
            script: str = __file__) -> Job:
    """Run ``world`` ranks of this script; a SIGSTOPped rank gets SIGCONT once rank 0 is
    gone (so it can read the verdict and exit); whatever still runs at the end is listed in
    ``left`` and killed."""
    import threading

    procs, port = start_job(mode, directory, world=world, watch_timeout=watch_timeout,
                            extra=extra, script=script)
    outs: dict[int, tuple[str, str]] = {}

    def drain(rank: int) -> None:
        outs[rank] = procs[rank].communicate()

    readers = [threading.Thread(target=drain, args=(r,), daemon=True) for r in range(world)]
    for reader in readers:
        reader.start()
    deadline, rank0_exit = time.monotonic() + timeout, None
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        if procs[0].poll() is not None and rank0_exit is None:
            rank0_exit = time.time()
            for p in procs[1:]:
                if p.poll() is None:
                    os.kill(p.pid, signal.SIGCONT)
        time.sleep(0.1)
    if rank0_exit is None and procs[0].poll() is not None:
        rank0_exit = time.time()  # every rank ended within the same poll
    left = leftovers(procs, port, world, patience=0 if rank0_exit is None else 10)
    for reader in readers:
        reader.join(10)
    fault = next((line.split()[2] for out, _err in outs.values()
                  for line in out.splitlines() if line.startswith("fault ")), None)
    return Job({r: p.wait() for r, p in enumerate(procs)},
               {r: outs.get(r, ("", ""))[1] for r in range(world)},
               {r: outs.get(r, ("", ""))[0] for r in range(world)},
               float(fault) if fault else None, rank0_exit, _mtime(directory), left)


def _mtime(directory: str) -> float | None:
    path = os.path.join(directory, "report.json")
    return os.path.getmtime(path) if os.path.exists(path) else None


if __name__ == "__main__":
    main(sys.argv[1])
