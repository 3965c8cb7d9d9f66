"""The one place training brings up (and tears down) the process group.

It uses ``ddpnet.init()`` when that is available (interface selection, pre-flight checks,
explained rendezvous errors); otherwise it resolves the launcher with
:func:`ddpnet.env.resolve.resolve` and calls ``init_process_group`` itself. Everything else in
``ddpnet.train`` only sees the small :class:`Dist` record.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Dist:
    rank: int
    world_size: int
    local_rank: int
    backend: str
    #: "cpu" or "cuda:<local_rank>"
    device: str
    #: what brought the group up, for the summary
    via: str
    #: the interface the backend uses (from ddpnet.init's selection), for telemetry
    interface: str | None = None


def pick_backend(requested: str, device: str) -> str:
    """NCCL for CUDA tensors, gloo for CPU ones (an explicit choice wins)."""
    if requested != "auto":
        return requested
    return "nccl" if device == "cuda" else "gloo"


def init_distributed(device: str, backend: str = "auto", timeout_s: float = 300.0) -> Dist:
    """Join the process group described by the launcher's environment (torchrun, srun,
    mpirun, the lab, ``ddpnet train --local``; a lone process is a group of one)."""
    import ddpnet

    chosen = pick_backend(backend, device)
    init = getattr(ddpnet, "init", None)
    if callable(init):
        from ddpnet.env.resolve import resolve

        overrides: dict[str, object] = {}
        if resolve().world_size == 1:  # a lone process: any free loopback port will do
            from ddpnet.net.ports import free_port

            overrides = {"master_addr": "127.0.0.1", "master_port": free_port()}
        handle = init(backend=chosen, timeout=timeout_s, **overrides)
        local_rank = int(handle.config.local_rank)
        via = "ddpnet.init"
        rank, world = int(handle.rank), int(handle.world_size)
        interface = handle.interface
    else:
        from ddpnet.env.resolve import resolve

        cfg = resolve()
        url = cfg.init_method
        if cfg.world_size == 1:  # a lone process: any free loopback port will do
            from ddpnet.net.ports import free_port

            url = f"tcp://127.0.0.1:{free_port()}"
        elif url.startswith("env://"):  # the resolved values, whichever launcher gave them
            url = f"tcp://{cfg.master_addr}:{cfg.master_port}"
        dist.init_process_group(chosen, init_method=url, rank=cfg.rank,
                                world_size=cfg.world_size,
                                timeout=datetime.timedelta(seconds=timeout_s))
        rank, world, local_rank = cfg.rank, cfg.world_size, cfg.local_rank
        interface = None
        via = f"torch.distributed ({cfg.launcher} launcher, {url})"
    dev = "cpu"
    if device == "cuda" and via != "ddpnet.init":  # init() already set the device
        torch.cuda.set_device(local_rank)
        dev = f"cuda:{local_rank}"
    return Dist(rank, world, local_rank, chosen, dev, via, interface)


def shutdown() -> None:
    """Leave the group together: a barrier first, so no rank tears its connections down
    while a peer's gloo thread still reads from them (that aborts the peer at exit with
    "terminate called without an active exception", exit 134)."""
    import ddpnet

    if dist.is_available() and dist.is_initialized():
        try:
            dist.barrier()
        finally:
            ddpnet.shutdown()
