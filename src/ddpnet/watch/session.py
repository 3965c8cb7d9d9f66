"""The watch of one process (``ddpnet.init()`` starts it, ``ddpnet.shutdown()`` ends it), and
the public ``ddpnet.phase()`` / ``ddpnet.step()``.

Knobs: ``init(watch=..., watch_timeout=..., watch_action=...)`` or the environment
``DDPNET_WATCH=0`` (off), ``DDPNET_WATCH_TIMEOUT`` (seconds; default: learned from the job,
``watch.threshold``),
``DDPNET_WATCH_ACTION`` (``exit`` or ``warn``), ``DDPNET_WATCH_DIR`` (dumps and report,
default ``./ddpnet-watch``), ``DDPNET_WATCH_PORT`` (the hub's port; default derived from
MASTER_ADDR:MASTER_PORT). An argument wins over the environment.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from ddpnet.config import DistConfig
from ddpnet.errors import ConfigError
from ddpnet.watch.dump import watch_dir
from ddpnet.watch.heartbeat import Beacon
from ddpnet.watch.recorder import FR_ENTRIES, Recorder
from ddpnet.watch.state import LONG_PHASES, RankState
from ddpnet.watch.watchdog import ACTIONS

_OFF = ("0", "false", "no", "off")


@dataclass(frozen=True)
class WatchConfig:
    enabled: bool
    #: the user's override in seconds; None: learned from the job (watch.threshold)
    timeout: float | None = None
    action: str = "exit"
    directory: Path = Path("ddpnet-watch")
    port: int | None = None


def watch_config(environ: Mapping[str, str], watch: bool | None = None,
                 timeout: float | None = None, action: str | None = None) -> WatchConfig:
    """The watch settings from the arguments, else the environment, else the defaults (pure);
    ConfigError on a bad value."""
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
                       int(port) if port else None)


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
    """From MASTER_ADDR:MASTER_PORT, and torchrun's restart count after a restart (the last
    round's hub may still hold the port for a few seconds)."""
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


# -- the hub (rank 0) --------------------------------------------------------------------------

def start_hub(cfg: DistConfig, wc: WatchConfig, bind: str) -> subprocess.Popen[bytes] | str:
    """Start the hub process listening on ``bind``; the Popen, or why it could not start."""
    from ddpnet.watch.hub import HubOptions

    options = HubOptions(bind=bind, port=hub_port(cfg, wc), world_size=cfg.world_size,
                         timeout=wc.timeout, action=wc.action, directory=str(wc.directory),
                         token=job_token(cfg))
    proc = subprocess.Popen([sys.executable, "-m", "ddpnet.watch.hub", options.to_json()],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    line = _first_line(proc, 15.0)
    if not line.startswith("ready"):
        proc.kill()
        proc.wait(5)
        return line or "the hub did not start within 15 s"
    return proc


def _first_line(proc: subprocess.Popen[bytes], timeout: float) -> str:
    import select

    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline().decode(errors="replace").strip() if ready else ""
    proc.stdout.close()
    return line


#: exception types (by name, anywhere in the class's MRO) that c10d raises when a peer or the
#: network failed: DistBackendError (gloo/NCCL), DistNetworkError, DistStoreError
_PEER_TYPES = frozenset({"DistError", "DistBackendError", "DistNetworkError", "DistStoreError"})
#: what gloo, NCCL and the store say in a plain RuntimeError when a peer went away
_PEER_WORDS = ("connection closed by peer", "connection reset by peer", "broken pipe",
               "connection refused", "timed out", "socket timeout", "no route to host",
               "communicator was aborted", "ncclremoteerror", "remote process exited",
               "network is unreachable")
#: the longest a failing rank waits for the watch's verdict
VERDICT_WAIT_S = 10.0


def peer_failure(kind: type[BaseException], text: str) -> bool:
    """Whether an exception says a peer or the network failed, not this rank's own code
    (pure): such a rank waits for the verdict that names who, instead of exiting 1 with a
    traceback that names nobody."""
    names = {k.__name__ for k in kind.__mro__}
    if names & _PEER_TYPES:
        return True
    low = text.lower()
    return "RuntimeError" in names and any(w in low for w in _PEER_WORDS)


def short_error(kind: str, text: str, limit: int = 160) -> str:
    """``RuntimeError: Connection reset by peer ...`` without gloo's source path (pure)."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    if first.startswith("[") and "] " in first:
        first = first.split("] ", 1)[1]
    first = first if len(first) <= limit else first[:limit - 3] + "..."
    return f"{kind}: {first}" if first else kind


# -- this process ------------------------------------------------------------------------------

class Session:
    def __init__(self, recorder: Recorder, beacon: Beacon, undo: Callable[[], None],
                 hub: subprocess.Popen[bytes] | None, verdict_wait: float = 0.0) -> None:
        self.recorder, self.beacon, self.undo, self.hub = recorder, beacon, undo, hub
        self.previous_hook = sys.excepthook
        #: seconds a rank dying of a peer's failure waits for the verdict (0: never)
        self.verdict_wait = verdict_wait

    def excepthook(self, kind: type[BaseException], exc: BaseException,
                   tb: TracebackType | None) -> None:
        # Ctrl-C and SIGTERM (errors.Terminated) are someone's intent, sent to every rank:
        # a goodbye, not a failure to report
        if not issubclass(kind, Exception):
            self.beacon.close("")
            self.previous_hook(kind, exc, tb)
            return
        error = short_error(kind.__name__, str(exc))
        if self.verdict_wait > 0 and peer_failure(kind, str(exc)):
            # the traceback first (the user's own context), then the verdict's one line and
            # its exit code, from the heartbeat thread, when the hub names the cause
            self.previous_hook(kind, exc, tb)
            sys.stderr.write(f"ddpnet: watch: {error.split(':')[0]} from a peer; waiting up "
                             f"to {self.verdict_wait:.0f} s for the watch to name the cause\n")
            sys.stderr.flush()
            self.beacon.await_verdict(error, self.verdict_wait)
            return
        self.beacon.close(error)
        self.previous_hook(kind, exc, tb)

    def stop(self) -> None:
        self.beacon.close()
        self.undo()
        self.recorder.announce = lambda _record: None
        self.recorder.issued = lambda: 0
        if sys.excepthook == self.excepthook:
            sys.excepthook = self.previous_hook


_recorder = Recorder()
_session: Session | None = None


def recorder() -> Recorder:
    return _recorder


def start(cfg: DistConfig, wc: WatchConfig, address: str, interface: str | None,
          hub: subprocess.Popen[bytes] | None, hub_address: str) -> None:
    """Connect this rank's heartbeat to the hub and announce Python collectives; a warning on
    stderr (and no watch) when the hub cannot be reached."""
    import torch.distributed as dist

    global _session
    if not dist.is_initialized():  # no default group (init_process_group stubbed): no watch
        return
    host = socket.gethostname()
    ident = RankState(rank=cfg.rank, world_size=cfg.world_size, host=host, pid=os.getpid(),
                      interface=interface or "", address=address)
    beacon = Beacon(_recorder, ident, wc.directory, override=wc.timeout)
    try:
        beacon.open_ports(gloo=dist.get_backend() == "gloo", exclude=(cfg.master_port,))
        # rank 0 started the hub before the group existed: no need to wait long for it
        beacon.connect(hub_address, hub_port(cfg, wc), token=job_token(cfg), patience=3.0)
    except OSError as exc:
        beacon.close()
        sys.stderr.write(f"ddpnet: warning: rank {cfg.rank} on {host}: the watch is off: no "
                         f"hub at {hub_address}:{hub_port(cfg, wc)} ({exc})\n")
        return
    group = dist.distributed_c10d._get_default_group()
    undo = _recorder.wrap_collectives(dist, lambda: _next_seq(group))
    _recorder.issued = lambda: max(0, _next_seq(group) - 1)
    _recorder.backend = str(dist.get_backend())
    _recorder.announce = beacon.announce
    _session = Session(_recorder, beacon, undo, hub,
                       verdict_wait=min(wc.timeout or VERDICT_WAIT_S, VERDICT_WAIT_S)
                       if wc.action == "exit"
                       else 0.0)
    sys.excepthook = _session.excepthook
    atexit.register(stop)


def _next_seq(group: Any) -> int:
    try:
        return int(group._get_sequence_number_for_group()) + 1
    except Exception:  # a backend without sequence numbers
        return 0


def stop() -> None:
    """Say goodbye to the hub (``ddpnet.shutdown()`` and at exit)."""
    global _session
    session, _session = _session, None
    if session is not None:
        session.stop()


def active() -> bool:
    return _session is not None


def ports() -> dict[str, int]:
    """The ports this rank published for its peers' link probes ({} when not watched)."""
    session = _session
    if session is None:
        return {}
    return dict(session.beacon.ident.extra.get("ports", {}))


def threshold() -> dict[str, object] | None:
    """The stall threshold this rank last heard from the hub (seconds, source, reason), or
    None when not watched: what a long phase is measured against."""
    session = _session
    return None if session is None else session.beacon.threshold.to_dict()


# -- the public API ----------------------------------------------------------------------------

class _Phase(contextlib.AbstractContextManager["_Phase"]):
    """``ddpnet.phase("data")`` marks the phase now; as a context manager it puts the
    previous phase back on exit. A long phase ("checkpoint", "eval", "warmup") held by a
    ``with`` block stays in effect through the phase marks inside it."""

    def __init__(self, name: str) -> None:
        rec = _recorder
        self.previous = (rec.phase, rec.long_phase, rec.long_since)
        self.held = 0
        rec.set_phase(name)
        self.name = name

    def __enter__(self) -> _Phase:
        if self.name in LONG_PHASES:
            self.held = 1
            _recorder.hold_long()
        return self

    def __exit__(self, *exc: object) -> None:
        _recorder.restore(*self.previous, self.held)


def phase(name: str) -> _Phase:
    """Mark this rank's training phase ("data", "forward", "backward", "step", ...), shown when
    the watchdog names a rank that does not arrive. Cheap (a lock and a clock read).

    ``with ddpnet.phase("checkpoint"):`` (or "eval", "warmup") marks a phase that may keep
    the other ranks waiting long: the watchdog gives it its own allowance
    (:mod:`ddpnet.watch.threshold`) instead of naming a hang after a few seconds."""
    return _Phase(name)


def step(n: int) -> None:
    """Mark the start of training step ``n`` (its time feeds the straggler analysis)."""
    _recorder.set_step(int(n))
