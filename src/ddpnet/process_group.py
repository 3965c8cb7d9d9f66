"""``ddpnet.init()`` / ``ddpnet.shutdown()``: one call instead of the guides' boilerplate.

It resolves the configuration from whatever launched the process, picks the interface per
host (``ddpnet.net.select``), proves the rendezvous can work within ``connect_timeout``
(``ddpnet.net.probe.preflight``) and only then calls ``init_process_group``. It sets only
the variables it reports in ``Handle.environ_set`` and puts them back on shutdown.
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass, field
from datetime import timedelta
from types import TracebackType
from typing import Any

from ddpnet.config import DistConfig
from ddpnet.errors import ConfigError, RendezvousError
from ddpnet.net.select import Selection

BACKENDS = ("auto", "gloo", "nccl")

#: variables init() set, with the value they had before (None: unset), for shutdown()
_saved: dict[str, str | None] = {}


@dataclass(frozen=True)
class Handle:
    """What ``init()`` brought up; a context manager that shuts the group down."""

    rank: int
    world_size: int
    backend: str
    device: str
    interface: str | None
    config: DistConfig
    selection: Selection | None = None
    environ_set: dict[str, str] = field(default_factory=dict)

    @property
    def local_rank(self) -> int:
        return self.config.local_rank

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def __enter__(self) -> Handle:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        shutdown()


def pick_backend(requested: str, cuda_devices: int, nccl_available: bool) -> tuple[str, str]:
    """(backend, reason): explicit wins; auto is nccl when CUDA devices are visible (pure)."""
    if requested not in BACKENDS:
        raise ConfigError(f"backend {requested!r} is not one of {', '.join(BACKENDS)}",
                          "use backend='auto' (nccl with GPUs, else gloo), 'nccl' or 'gloo'")
    if requested == "nccl" and (cuda_devices == 0 or not nccl_available):
        why = "no CUDA device is visible" if cuda_devices == 0 else "torch has no NCCL"
        raise ConfigError(f"backend 'nccl' requested but {why}",
                          "use backend='gloo' on CPU-only nodes, or install a CUDA build of "
                          "torch and check `nvidia-smi` / CUDA_VISIBLE_DEVICES")
    if requested != "auto":
        return requested, "argument backend"
    if cuda_devices > 0 and nccl_available:
        return "nccl", f"{cuda_devices} CUDA device(s) visible"
    return "gloo", "no CUDA device visible"


def init_url(cfg: DistConfig) -> str:
    """The URL handed to torch: env:// becomes tcp://MASTER_ADDR:PORT with explicit rank and
    world size, so torch needs no MASTER_* variables (which ddpnet may have derived from
    SLURM or an override) and init() does not have to export them."""
    if cfg.init_method.startswith(("tcp://", "file://")):
        return cfg.init_method
    host = f"[{cfg.master_addr}]" if ":" in cfg.master_addr else cfg.master_addr
    return f"tcp://{host}:{cfg.master_port}"


def _set_env(values: dict[str, str]) -> None:
    for key, value in values.items():
        if key not in _saved:
            _saved[key] = os.environ.get(key)
        os.environ[key] = value


def _restore_env() -> None:
    for key, old in _saved.items():
        if old is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old
    _saved.clear()


def _seconds(name: str, value: Any, hint: str) -> float:
    """A positive, finite number of seconds (numeric strings too), or ConfigError."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = float("nan")
    if not 0 < seconds < float("inf"):  # nan fails too
        raise ConfigError(f"{name}={value!r} must be a positive number of seconds", hint)
    return seconds


def init(backend: str = "auto", init_method: str | None = None, timeout: float | None = None,
         connect_timeout: float = 60, *, ifname: str | None = None,
         **overrides: Any) -> Handle:
    """Bring up the default process group on the right interface, or fail fast with a cause.

    ``timeout`` (seconds) is torch's process-group timeout (None: torch's default);
    ``connect_timeout`` bounds the preflight. ``ifname`` forces one interface for gloo,
    NCCL and TensorPipe. ``overrides``: rank, world_size, local_rank, master_addr,
    master_port, ... as for ``ddpnet.resolve``. Raises ConfigError (bad input) or
    RendezvousError (``.cause``: master-unresolvable, master-no-route, master-port-filtered,
    master-port-refused, port-in-use, hostname-loopback, master-loopback, ifname-*,
    group-failed).
    """
    from ddpnet.env.resolve import resolve

    connect_timeout = _seconds("connect_timeout", connect_timeout,
                               "use a few seconds to a minute, e.g. connect_timeout=60")
    if timeout is not None:
        timeout = _seconds("timeout", timeout,
                           "leave it out for torch's default, or e.g. timeout=1800")
    cfg = resolve(init_method=init_method, **overrides)
    if backend not in BACKENDS:
        pick_backend(backend, 0, False)  # raises the ConfigError
    _refuse_second_group(cfg.rank)
    # network first, torch after: a wrong interface or a dead master is reported in a
    # fraction of a second instead of after importing torch
    selection = _select_and_probe(cfg, backend, connect_timeout, ifname)

    import torch
    import torch.distributed as dist

    cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
    chosen, _why = pick_backend(backend, cuda, dist.is_nccl_available())
    device = "cpu"
    if chosen == "nccl":
        device = _nccl_device(cfg, selection, cuda)

    to_set = selection.env()
    _set_env(to_set)
    _init_group(chosen, cfg, selection, timeout)
    return Handle(cfg.rank, cfg.world_size, chosen, device, selection.interface, cfg,
                  selection, dict(to_set))


def _refuse_second_group(rank: int) -> None:
    """Only when torch is already imported: init() must not import it before the preflight."""
    dist_mod = sys.modules.get("torch.distributed")
    if dist_mod is not None and dist_mod.is_available() and dist_mod.is_initialized():
        raise ConfigError(f"the default process group already exists (rank {rank})",
                          "call ddpnet.shutdown() (or destroy_process_group()) before init()")


def _select_and_probe(cfg: DistConfig, backend: str, connect_timeout: float,
                      ifname: str | None) -> Selection:
    """This host's interface selection, once the rendezvous preflight passed."""
    from ddpnet.net.probe import preflight
    from ddpnet.net.select import select_for_host

    selection = select_for_host(cfg, os.environ, ifname=ifname)
    preflight(cfg, selection, connect_timeout, backend="nccl" if backend == "nccl" else "gloo")
    return selection


def _nccl_device(cfg: DistConfig, selection: Selection, cuda: int) -> str:
    """Bind this rank to its GPU (``cuda:LOCAL_RANK``); NCCL's interface must be usable."""
    import torch

    problem = selection.error(host=socket.gethostname(), rank=cfg.rank, backend="nccl")
    if problem is not None:
        raise problem
    if cfg.local_rank >= cuda:
        raise ConfigError(
            f"local rank {cfg.local_rank} has no GPU: {cuda} CUDA device(s) visible "
            f"(rank {cfg.rank})",
            "run one process per GPU (--nproc-per-node = GPUs per node) or check "
            "CUDA_VISIBLE_DEVICES")
    torch.cuda.set_device(cfg.local_rank)
    return f"cuda:{cfg.local_rank}"


def _init_group(chosen: str, cfg: DistConfig, selection: Selection,
                timeout: float | None) -> None:
    """torch's init_process_group; its failure becomes a RendezvousError (env put back)."""
    import torch.distributed as dist

    kwargs: dict[str, Any] = {}
    if timeout is not None:
        kwargs["timeout"] = timedelta(seconds=timeout)
    try:
        dist.init_process_group(chosen, init_method=init_url(cfg), rank=cfg.rank,
                                world_size=cfg.world_size, **kwargs)
    except Exception as exc:  # torch raises DistError / RuntimeError subclasses
        _restore_env()
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        host = socket.gethostname()
        raise RendezvousError(
            "group-failed",
            f"init_process_group({chosen!r}) failed on {host} (rank {cfg.rank}) after the "
            f"preflight passed: {first[:300]}",
            f"ranks connect to each other on ephemeral ports over {selection.interface}: "
            f"check no firewall drops them between nodes (`ddpnet doctor`, `ddpnet tune`)",
            host=host, rank=cfg.rank, detail=str(exc)) from exc


def shutdown() -> None:
    """Destroy the default process group (if any) and put back the variables init() set."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    finally:
        _restore_env()
