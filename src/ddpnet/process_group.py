"""``ddpnet.init()`` / ``ddpnet.shutdown()``: one call instead of the guides' boilerplate.

It resolves the configuration from whatever launched the process, picks the interface per
host (``ddpnet.net.select``), proves the rendezvous can work within ``connect_timeout``
(``ddpnet.net.probe.preflight``) and only then calls ``init_process_group``. It sets only
the variables it reports in ``Handle.environ_set`` and puts them back on shutdown.

:func:`pick_backend` is the one choice of backend and device (nccl on cuda, gloo on cpu),
used by init() and so by ``train`` and ``bench``.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from types import TracebackType
from typing import Any

from ddpnet.config import DistConfig
from ddpnet.errors import ConfigError, RendezvousError
from ddpnet.net.select import Selection
from ddpnet.output import argument, lend_stdout

BACKENDS = ("auto", "gloo", "nccl")
DEVICES = ("auto", "cpu", "cuda")

#: variables init() set, with the value they had before (None: unset), for shutdown()
_saved: dict[str, str | None] = {}


@dataclass(frozen=True)
class BackendChoice:
    """The process group's backend and the device its tensors live on, each with why."""

    backend: str
    #: "cuda" or "cpu"
    device: str
    reason: str
    device_reason: str

    def device_for(self, local_rank: int) -> str:
        """The torch device string of local rank ``local_rank``."""
        return f"cuda:{local_rank}" if self.device == "cuda" else "cpu"


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
    #: the backend/device choice with its reasons
    choice: BackendChoice | None = None
    #: the hang watch (ddpnet.watch) runs on this rank
    watching: bool = False

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


def check_requested(backend: str, device: str = "auto") -> None:
    """ConfigError unless ``backend`` and ``device`` are names we know (pure, no torch)."""
    if backend not in BACKENDS:
        raise ConfigError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}",
                          f"use {argument('backend', 'auto')} (nccl with GPUs, else gloo), "
                          f"{argument('backend', 'nccl')} or {argument('backend', 'gloo')}")
    if device not in DEVICES:
        raise ConfigError(f"device {device!r} is not one of {', '.join(DEVICES)}",
                          f"use {argument('device', 'auto')} (cuda with GPUs, else cpu), "
                          f"{argument('device', 'cuda')} or {argument('device', 'cpu')}")


def check_possible_here(backend: str = "auto", device: str = "auto") -> None:
    """ConfigError now, in the process that would start the ranks, when ``backend``/``device``
    cannot run on this node: ``--local`` runs of check, bench and train call it before
    spawning (each rank would import torch and fail the same way, the parent saying nothing
    on stdout). Names are checked without torch; only an explicit ``nccl`` or ``cuda`` asks
    torch (:func:`choose`), ``auto`` always has an answer."""
    check_requested(backend, device)
    if backend == "nccl" or device == "cuda":
        choose(backend, device)


def pick_backend(requested: str, cuda_devices: int, nccl_available: bool,
                 device: str = "auto") -> BackendChoice:
    """THE backend/device choice (pure): nccl on cuda, gloo on cpu; an explicit backend or
    device wins, an impossible one is a ConfigError. Used by init(), train and bench."""
    check_requested(requested, device)
    _check_possible(requested, device, cuda_devices, nccl_available)
    chosen_device, device_why = _pick_device(requested, device, cuda_devices, nccl_available)
    if requested != "auto":
        return BackendChoice(requested, chosen_device, "argument backend", device_why)
    if chosen_device == "cuda" and nccl_available:
        return BackendChoice("nccl", "cuda", f"{cuda_devices} CUDA device(s) visible",
                             device_why)
    why = "torch has no NCCL" if chosen_device == "cuda" else "no CUDA device visible"
    return BackendChoice("gloo", chosen_device, why, device_why)


def gpu_index(local_rank: int, visible: int) -> int | None:
    """THE CUDA device a local rank uses (pure): its local rank among the visible GPUs, or
    None where fewer GPUs are visible (two ranks would share one, which NCCL refuses)."""
    return local_rank if 0 <= local_rank < visible else None


def _check_possible(backend: str, device: str, cuda_devices: int,
                    nccl_available: bool) -> None:
    if device == "cuda" and cuda_devices == 0:
        raise ConfigError("device 'cuda' requested but torch sees no CUDA device on this node",
                          f"use {argument('device', 'cpu')}, or check `nvidia-smi`, "
                          "CUDA_VISIBLE_DEVICES and that torch is a CUDA build")
    if backend != "nccl":
        return
    if cuda_devices == 0 or not nccl_available:
        why = "no CUDA device is visible" if cuda_devices == 0 else "torch has no NCCL"
        raise ConfigError(f"backend 'nccl' requested but {why}",
                          f"use {argument('backend', 'gloo')} on CPU-only nodes, or install a "
                          "CUDA build of "
                          "torch and check `nvidia-smi` / CUDA_VISIBLE_DEVICES")
    if device == "cpu":
        raise ConfigError("backend 'nccl' with device 'cpu': NCCL only moves CUDA tensors",
                          f"use {argument('backend', 'gloo')} for cpu tensors, or "
                          f"{argument('device', 'cuda')}")


def _pick_device(backend: str, device: str, cuda_devices: int,
                 nccl_available: bool) -> tuple[str, str]:
    if device != "auto":
        return device, "argument device"
    if backend == "nccl":
        return "cuda", "NCCL moves CUDA tensors"
    if backend == "gloo":
        return "cpu", "backend gloo: tensors stay on cpu"
    if cuda_devices == 0:
        return "cpu", "no CUDA device visible"
    if not nccl_available:
        return "cpu", f"{cuda_devices} CUDA device(s) visible but torch has no NCCL"
    return "cuda", f"{cuda_devices} CUDA device(s) visible"


def init_url(cfg: DistConfig) -> str:
    """The URL handed to torch: env:// becomes tcp://MASTER_ADDR:PORT with explicit rank and
    world size, so torch needs no MASTER_* variables (which ddpnet may have derived from
    SLURM or an override) and init() does not have to export them."""
    if cfg.init_method.startswith(("tcp://", "file://")):
        return cfg.init_method
    host = f"[{cfg.master_addr}]" if ":" in cfg.master_addr else cfg.master_addr
    return f"tcp://{host}:{cfg.master_port}"


def _set_env(values: Mapping[str, str]) -> None:
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


#: the longest timeout init() takes (a week): torch's C++ timeouts overflow far beyond
MAX_SECONDS = 7 * 86400.0


def _seconds(name: str, value: Any, hint: str) -> float:
    """A positive, finite number of seconds (numeric strings too), or ConfigError."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = float("nan")
    if not 0 < seconds <= MAX_SECONDS:  # nan fails too; torch's timedelta overflows beyond
        raise ConfigError(f"{name}={value!r} must be a positive number of seconds, at most "
                          f"{MAX_SECONDS:g} (a week)", hint)
    return seconds


def init(backend: str = "auto", init_method: str | None = None, timeout: float | None = None,
         connect_timeout: float = 60, *, ifname: str | None = None, device: str = "auto",
         join_timeout: float | None = None, watch: bool | None = None,
         watch_timeout: float | None = None, watch_action: str | None = None,
         metrics_port: int | None = None, **overrides: Any) -> Handle:
    """Bring up the default process group on the right interface, or fail fast with a cause.

    ``timeout`` (seconds) is torch's process-group timeout (None: torch's default);
    ``connect_timeout`` bounds the preflight. ``ifname`` forces one interface for gloo,
    NCCL and TensorPipe. ``device`` ("auto", "cpu", "cuda") is where tensors live, chosen
    with the backend by :func:`pick_backend`; on cuda the local rank's GPU becomes the
    current device. ``join_timeout`` (default: ``connect_timeout``) bounds how long every
    rank waits for the others at the rendezvous before the missing ranks are named.
    ``watch`` (default on, ``DDPNET_WATCH=0`` turns it off) names a hang mid-training:
    after ``watch_timeout`` seconds without progress (default 60) every rank exits with the
    cause, or only reports it with ``watch_action="warn"`` (docs/watch.md).
    ``metrics_port`` (or ``DDPNET_METRICS_PORT``): rank 0 serves the job's Prometheus
    metrics there, on the job's interface (docs/watch.md; in use: ConfigError, exit 2).
    ``overrides``: rank, world_size, local_rank, master_addr, master_port, ... as for
    ``ddpnet.resolve``. Raises ConfigError (bad input) or RendezvousError (``.cause``:
    master-unresolvable, master-no-route, master-port-filtered, master-port-refused,
    master-port-foreign, port-in-use, hostname-loopback, master-loopback, ifname-*,
    missing-ranks, group-failed).
    """
    from ddpnet.env.resolve import resolve
    from ddpnet.net.probe import check_store, preflight
    from ddpnet.net.select import select_for_host
    from ddpnet.watch import session, settings  # here: check's ranks import this module

    connect_timeout = _seconds("connect_timeout", connect_timeout,
                               "use a few seconds to a minute, e.g. connect_timeout=60")
    if timeout is not None:
        timeout = _seconds("timeout", timeout,
                           "leave it out for torch's default, or e.g. timeout=1800")
    join_timeout = connect_timeout if join_timeout is None else _seconds(
        "join_timeout", join_timeout, "the seconds ranks may start apart, e.g. join_timeout=300")
    cfg = resolve(init_method=init_method, **overrides)
    check_requested(backend, device)
    wc = settings.watch_config(os.environ, watch, watch_timeout, watch_action, metrics_port)
    _refuse_second_group(cfg)
    # network first, torch after: a wrong interface or a dead master is reported in a
    # fraction of a second instead of after importing torch
    selection = select_for_host(cfg, os.environ, ifname=ifname)
    preflight(cfg, selection, connect_timeout, backend="nccl" if backend == "nccl" else "gloo")
    # what answers on MASTER_PORT is a TCPStore, not another service
    check_store(cfg, patience=min(connect_timeout, 10.0))
    choice = choose(backend, device)
    placed = _place(choice, cfg, selection)
    _set_env(selection.env())
    lend_stdout()  # under --json, NCCL's debug lines go to stderr, not into the JSON
    around = session.around_group(
        cfg, wc, lambda: _init_group(choice.backend, cfg, selection, timeout, join_timeout),
        address=selection.address or "", interface=selection.interface, set_env=_set_env)
    return Handle(cfg.rank, cfg.world_size, choice.backend, placed, selection.interface, cfg,
                  selection, {**selection.env(), **around.environ_set}, choice, around.watching)


def choose(backend: str = "auto", device: str = "auto") -> BackendChoice:
    """:func:`pick_backend` with this process's facts from torch (imports torch)."""
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return pick_backend(backend, cuda, dist.is_nccl_available(), device)


def _refuse_second_group(cfg: DistConfig) -> None:
    dist_mod = sys.modules.get("torch.distributed")
    if dist_mod is not None and dist_mod.is_available() and dist_mod.is_initialized():
        raise ConfigError(f"the default process group already exists (rank {cfg.rank})",
                          "call ddpnet.shutdown() (or destroy_process_group()) before init()")


def _place(choice: BackendChoice, cfg: DistConfig, selection: Selection) -> str:
    """This rank's device string; on cuda, make the local rank's GPU the current device."""
    import torch

    if choice.backend == "nccl":
        problem = selection.error(host=socket.gethostname(), rank=cfg.rank, backend="nccl")
        if problem is not None:
            raise problem
    if choice.device != "cuda":
        return "cpu"
    cuda = torch.cuda.device_count()
    if gpu_index(cfg.local_rank, cuda) is None:
        raise ConfigError(
            f"local rank {cfg.local_rank} has no GPU: {cuda} CUDA device(s) visible "
            f"(rank {cfg.rank})",
            "run one process per GPU (--nproc-per-node = GPUs per node) or check "
            "CUDA_VISIBLE_DEVICES")
    torch.cuda.set_device(cfg.local_rank)
    return choice.device_for(cfg.local_rank)


#: torch's default process-group timeout (gloo), used for the store when none is given
_DEFAULT_TIMEOUT_S = 1800.0


def _init_group(backend: str, cfg: DistConfig, selection: Selection,
                timeout: float | None, join_timeout: float) -> None:
    """init_process_group on our own rendezvous store (torchrun's agent store and file://
    keep torch's path); a failure is a RendezvousError, with the environment put back."""
    import torch.distributed as dist

    from ddpnet.rendezvous import (
        GROUP_HINT,
        GroupGuard,
        group_failed_message,
        open_store,
        own_store,
        report_group_failure,
    )

    kwargs: dict[str, Any] = {"rank": cfg.rank, "world_size": cfg.world_size}
    if timeout is not None:
        kwargs["timeout"] = timedelta(seconds=timeout)
    host = socket.gethostname()
    store = None
    try:
        if own_store(cfg, os.environ):
            store = open_store(cfg, host, timeout or _DEFAULT_TIMEOUT_S, join_timeout)
            with GroupGuard(cfg, host):  # another rank failing here stops this one at once
                dist.init_process_group(backend, store=store, **kwargs)
        else:
            dist.init_process_group(backend, init_method=init_url(cfg), **kwargs)
    except RendezvousError:
        _restore_env()
        raise
    except Exception as exc:  # torch raises DistError / RuntimeError subclasses
        _restore_env()
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        earlier = None if store is None else report_group_failure(store, cfg, host, first[:300])
        followed = group_failed_message(cfg, host, earlier, first) if earlier else None
        if followed is not None:  # another rank failed first: its cause is the job's
            raise RendezvousError("group-failed", followed, GROUP_HINT, host=host,
                                  rank=cfg.rank, detail=str(exc)) from exc
        raise RendezvousError(
            "group-failed",
            f"init_process_group({backend!r}) failed on {host} (rank {cfg.rank}) after the "
            f"preflight passed: {first[:300]}", _group_hint(first, selection),
            host=host, rank=cfg.rank, detail=str(exc)) from exc


def _group_hint(error: str, selection: Selection) -> str:
    """A refused or filtered peer is a firewall; an unreachable one is a route or a NAT."""
    low = error.lower()
    if "unreachable" in low or "no route" in low:
        return ("this node has no route to a peer's advertised address (another subnet, or a "
                "NAT/VIP/port forward between nodes: the store is reached, the peers are not); "
                "run `ddpnet check` on every node to name the pair")
    return (f"ranks connect to each other on ephemeral ports over {selection.interface}: "
            f"check no firewall drops them between nodes (`ddpnet doctor`, `ddpnet tune`)")


def shutdown() -> None:
    """Destroy the default process group (if any) and put back the variables init() set."""
    from ddpnet.watch.session import stop as stop_watch

    stop_watch()
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    finally:
        _restore_env()
