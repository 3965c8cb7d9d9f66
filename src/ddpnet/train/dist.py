"""How training joins (and leaves) the process group: through ``ddpnet.init()``.

init() makes the one backend/device choice (``ddpnet.process_group.pick_backend``: nccl on
cuda, gloo on cpu), selects the interface, runs the preflight and, on cuda, makes the local
rank's GPU the current device. Training adds only what a lone process needs (a free loopback
port instead of a launcher). Everything else in ``ddpnet.train`` sees the small :class:`Dist`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from ddpnet.config import DistConfig
from ddpnet.net.ports import free_port


@dataclass(frozen=True)
class Dist:
    rank: int
    world_size: int
    local_rank: int
    backend: str
    #: "cpu" or "cuda:<local_rank>"
    device: str
    #: what brought the group up and why this backend/device, for the summary
    via: str
    #: the interface the backend uses (from ddpnet.init's selection), for telemetry
    interface: str | None = None


def lone_overrides(cfg: DistConfig, port: Callable[[], int] = free_port) -> dict[str, Any]:
    """A lone process (world size 1, no launcher) rendezvouses with itself on any free
    loopback port; a rank of a larger group keeps what its launcher said (pure but ``port``)."""
    if cfg.world_size != 1:
        return {}
    return {"master_addr": "127.0.0.1", "master_port": port()}


def init_distributed(device: str = "auto", timeout_s: float = 300.0,
                     metrics_port: int | None = None) -> Dist:
    """Join the process group described by the launcher's environment (torchrun, srun,
    mpirun, the lab, ``ddpnet train --local``; a lone process is a group of one) with tensors
    on ``device`` ("auto", "cpu" or "cuda")."""
    from ddpnet.env.resolve import resolve
    from ddpnet.process_group import init

    handle = init(device=device, timeout=timeout_s, metrics_port=metrics_port,
                  **lone_overrides(resolve()))
    via = "ddpnet.init"
    if handle.choice is not None:
        via += (f" ({handle.backend}: {handle.choice.reason}; {handle.device}: "
                f"{handle.choice.device_reason})")
    return Dist(handle.rank, handle.world_size, handle.local_rank, handle.backend,
                handle.device, via, handle.interface)


def shutdown() -> None:
    """Leave the group together: a barrier first, so no rank tears its connections down
    while a peer's gloo thread still reads from them (that aborts the peer at exit with
    "terminate called without an active exception", exit 134)."""
    from ddpnet.process_group import shutdown as leave_group

    if dist.is_available() and dist.is_initialized():
        try:
            dist.barrier()
        finally:
            leave_group()
