"""Bringing up and tearing down the process group ``ddpnet bench`` runs in (edge).

``ddpnet.init()`` (interface selection, preflight, clear rendezvous errors) is used when this
installation has it; otherwise torch is initialised directly from the resolved launcher
configuration (tcp:// to the resolved master, so SLURM/MPI launches need no MASTER_ADDR).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from ddpnet.errors import ConfigError


def pick_backend(requested: str, cuda_available: bool) -> str:
    """``auto``: nccl when a GPU is visible, else gloo."""
    if requested == "auto":
        return "nccl" if cuda_available else "gloo"
    return requested


def torch_init_url(init_method: str, master_addr: str, master_port: int) -> str:
    """The URL torch gets: file:// as given, everything else tcp:// to the resolved master."""
    if init_method.startswith("file://"):
        return init_method
    host = f"[{master_addr}]" if ":" in master_addr else master_addr
    return f"tcp://{host}:{master_port}"


def _ddpnet_init() -> Any | None:
    try:
        module = importlib.import_module("ddpnet.init")
    except ImportError:
        return None
    return getattr(module, "init", None)


def init_group(requested: str, timeout_s: float,
               environ: Mapping[str, str] | None = None) -> str:
    """Initialise the default process group; returns the backend in use."""
    import torch
    import torch.distributed as dist

    backend = pick_backend(requested, torch.cuda.is_available())
    if backend == "nccl" and not torch.cuda.is_available():
        raise ConfigError("--backend nccl needs a CUDA GPU and none is visible",
                          "use --backend gloo (or auto) on CPU-only nodes")
    init = _ddpnet_init()
    if init is not None:
        init(backend=backend)
        return str(dist.get_backend())
    from ddpnet.env.ports import read_port_range
    from ddpnet.env.resolve import resolve_config

    cfg = resolve_config(os.environ if environ is None else environ, {},
                         port_range=read_port_range())
    if backend == "nccl":
        torch.cuda.set_device(cfg.local_rank % torch.cuda.device_count())
    dist.init_process_group(
        backend, init_method=torch_init_url(cfg.init_method, cfg.master_addr, cfg.master_port),
        rank=cfg.rank, world_size=cfg.world_size, timeout=timedelta(seconds=timeout_s),
    )
    return backend


def shutdown_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
