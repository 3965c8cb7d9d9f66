"""The watch's settings (pure): ``init()``'s arguments, else the ``DDPNET_WATCH*`` /
``DDPNET_METRICS*`` environment (docs/watch.md, "Knobs"), else the defaults; and the hub's port and
token derived from the job's rendezvous."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ddpnet.config import DistConfig
from ddpnet.errors import ConfigError
from ddpnet.watch.dump import watch_dir
from ddpnet.watch.recorder import FR_ENTRIES
from ddpnet.watch.watchdog import ACTIONS

_OFF = ("0", "false", "no", "off")
#: torchrun's run id when none was given (not one job's)
_NO_RUN_ID = ("", "none")


@dataclass(frozen=True)
class WatchConfig:
    enabled: bool
    #: the user's override in seconds; None: learned from the job (watch.threshold)
    timeout: float | None = None
    action: str = "exit"
    directory: Path = Path("ddpnet-watch")
    port: int | None = None
    #: where rank 0's hub serves metrics (None: not), its link probes' period, the job's id
    metrics_port: int | None = None
    probe_every: float = 300.0
    job_id: str = ""
    metrics_linger: float = 60.0


def watch_config(environ: Mapping[str, str], watch: bool | None = None,
                 timeout: float | None = None, action: str | None = None,
                 metrics_port: int | None = None) -> WatchConfig:
    """The arguments win over the environment; ConfigError on a bad value."""
    enabled = watch if watch is not None else \
        environ.get("DDPNET_WATCH", "1").strip().lower() not in _OFF
    raw_timeout = timeout if timeout is not None else \
        (environ.get("DDPNET_WATCH_TIMEOUT", "").strip() or None)
    seconds = None if raw_timeout is None else _seconds(raw_timeout)
    chosen = action if action is not None else environ.get("DDPNET_WATCH_ACTION", "exit")
    if chosen not in ACTIONS:
        raise ConfigError(f"watch_action={chosen!r} is not one of {', '.join(ACTIONS)}",
                          "use 'exit' (every rank exits with the cause) or 'warn' (report only)")
    port = environ.get("DDPNET_WATCH_PORT", "")
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise ConfigError(f"DDPNET_WATCH_PORT={port!r} is not a TCP port", "e.g. 29600")
    return WatchConfig(enabled, seconds, chosen, watch_dir(environ),
                       int(port) if port else None, *_metrics(environ, metrics_port))


def _metrics(environ: Mapping[str, str], port: int | None
             ) -> tuple[int | None, float, str, float]:
    """(metrics port, link probe period, job id, linger after a verdict)."""
    raw = str(port) if port is not None else environ.get("DDPNET_METRICS_PORT", "").strip()
    if raw and not (raw.isdigit() and 0 < int(raw) < 65536):
        raise ConfigError(f"metrics port {raw!r} (metrics_port / DDPNET_METRICS_PORT) is not "
                          "a TCP port", "use a port in 1..65535, e.g. DDPNET_METRICS_PORT=9464")
    probe_every = _env_seconds(environ, "DDPNET_METRICS_PROBE_S", 300, 86400,
                               "0: no link probes")
    linger = _env_seconds(environ, "DDPNET_METRICS_LINGER_S", 60, 3600,
                          "0: leave at once after a verdict")
    run_id = environ.get("TORCHELASTIC_RUN_ID", "")
    job = environ.get("DDPNET_JOB_ID") or environ.get("SLURM_JOB_ID") or \
        ("" if run_id in _NO_RUN_ID else run_id)
    return (int(raw) if raw else None), probe_every, job, linger


def _env_seconds(environ: Mapping[str, str], name: str, default: int, most: int,
                 zero: str) -> float:
    """``environ[name]`` as seconds in 0..most; ConfigError otherwise."""
    given = environ.get(name, "").strip() or str(default)
    try:
        seconds = float(given)
    except ValueError:
        seconds = float("nan")
    if not 0 <= seconds <= most:
        raise ConfigError(f"{name}={given!r} is not a number of seconds in 0..{most}",
                          f"e.g. {name}={default} ({zero})")
    return seconds


def _seconds(raw: object) -> float:
    try:
        seconds = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        seconds = float("nan")
    if not 0 < seconds <= 7 * 86400:
        raise ConfigError(f"watch_timeout={raw!r} must be a positive number of seconds",
                          "e.g. ddpnet.init(watch_timeout=120) or DDPNET_WATCH_TIMEOUT=120; "
                          "unset, the watch learns it from the job")
    return seconds


def hub_port(cfg: DistConfig, wc: WatchConfig) -> int:
    """The hub's port: chosen, or derived from the job's rendezvous (the same on every node)."""
    return derived_port(cfg.master_addr, cfg.master_port, wc)


def derived_port(master_addr: str, master_port: int, wc: WatchConfig,
                 environ: Mapping[str, str] | None = None) -> int:
    """From MASTER_ADDR:MASTER_PORT and torchrun's restart count (the last round's hub may still
    hold the port)."""
    from ddpnet.env.jobport import derive_port, read_port_range

    if wc.port is not None:
        return wc.port
    return derive_port(f"ddpnet-watch:{master_addr}:{master_port}{_round(environ)}",
                       read_port_range())


def _round(environ: Mapping[str, str] | None) -> str:
    restarts = (os.environ if environ is None else environ).get(
        "TORCHELASTIC_RESTART_COUNT", "0")
    return "" if restarts in ("", "0") else f":restart{restarts}"


def torch_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """What to set before the group exists: torch's Flight Recorder, unless the user sized it."""
    if environ.get("TORCH_FR_BUFFER_SIZE") or environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE"):
        return {}
    return {"TORCH_FR_BUFFER_SIZE": str(FR_ENTRIES)}


def job_token(cfg: DistConfig) -> str:
    """What the hub and the ranks check each other by: one job's rendezvous."""
    return f"{cfg.master_addr}:{cfg.master_port}:{cfg.world_size}{_round(None)}"
