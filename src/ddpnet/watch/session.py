"""The watch of one process (``ddpnet.init()`` starts it, ``ddpnet.shutdown()`` ends it), and
the public ``ddpnet.phase()`` / ``ddpnet.step()``.

Knobs: ``init(watch=..., watch_timeout=..., watch_action=...)`` or the environment
``DDPNET_WATCH=0`` (off), ``DDPNET_WATCH_TIMEOUT`` (seconds; default: learned from the job,
``watch.threshold``),
``DDPNET_WATCH_ACTION`` (``exit`` or ``warn``), ``DDPNET_WATCH_DIR`` (dumps and report,
default ``./ddpnet-watch``), ``DDPNET_WATCH_PORT`` (the hub's port; default derived from
MASTER_ADDR:MASTER_PORT). An argument wins over the environment.

Metrics: ``init(metrics_port=N)`` or ``DDPNET_METRICS_PORT=N`` has rank 0 bind that port on
the job's interface (its own address, chosen by ``net.select``) before the group comes up (in
use: a ConfigError, exit 2) and hand it to the hub, which serves the job's metrics there
(``watch.metrics``, docs/watch.md). ``DDPNET_METRICS_PROBE_S`` sets the seconds between its
link probe rounds (default 300, 0: none), ``DDPNET_METRICS_LINGER_S`` the longest the hub stays
after a verdict for a scrape to render it (default 60; it leaves at once when nothing
scrapes); ``DDPNET_JOB_ID`` (else ``SLURM_JOB_ID``, else
torchrun's run id, else a random one) is the ``job_id`` label.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

from ddpnet.config import DistConfig
from ddpnet.errors import ConfigError, short_error
from ddpnet.watch import exitnote, settle, termguard
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
    #: where rank 0's hub serves the job's metrics (None: not served), its link probes'
    #: period, and the job's id there
    metrics_port: int | None = None
    probe_every: float = 300.0
    job_id: str = ""
    metrics_linger: float = 60.0


def watch_config(environ: Mapping[str, str], watch: bool | None = None,
                 timeout: float | None = None, action: str | None = None,
                 metrics_port: int | None = None) -> WatchConfig:
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
                       int(port) if port else None, *_metrics(environ, metrics_port))


#: torchrun's run id when none was given (not one job's)
_NO_RUN_ID = ("", "none")


def _metrics(environ: Mapping[str, str], port: int | None
             ) -> tuple[int | None, float, str, float]:
    """(metrics port, link probe period, job id, linger after a verdict) from the argument,
    else the environment (pure); ConfigError on a bad value."""
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
    """``environ[name]`` as seconds in 0..most (pure); ConfigError otherwise."""
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

#: the longest rank 0 waits for its hub to say it listens
HUB_START_S = 15.0


def spawn_hub(cfg: DistConfig, wc: WatchConfig, bind: str,
              metrics: socket.socket | None = None) -> subprocess.Popen[bytes]:
    """Start the hub process listening on ``bind``, without waiting for it: it imports and
    binds while the process group comes up (:func:`hub_ready` collects it after), so the
    watch adds its ~0.4 s of start-up to neither. ``metrics``: the socket it serves the
    job's metrics on (this process's copy is closed once passed)."""
    import secrets

    from ddpnet import __version__
    from ddpnet.watch.hub import HubOptions

    fd = metrics.fileno() if metrics is not None else -1
    options = HubOptions(bind=bind, port=hub_port(cfg, wc), world_size=cfg.world_size,
                         timeout=wc.timeout, action=wc.action, directory=str(wc.directory),
                         token=job_token(cfg), metrics_fd=fd,
                         job_id=wc.job_id or secrets.token_hex(4),
                         probe_every=wc.probe_every, version=__version__,
                         metrics_linger=wc.metrics_linger)
    # a session of its own: torchrun ends a failed job with killpg(SIGTERM) on every worker's
    # group within 0.1 s of one dying, which took the hub with rank 0 before it named who died
    # (it ends by itself once every rank is gone: Hub.done)
    try:
        return subprocess.Popen([sys.executable, "-m", "ddpnet.watch.hub", options.to_json()],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                start_new_session=True, pass_fds=(fd,) if fd >= 0 else ())
    finally:
        if metrics is not None:
            metrics.close()


def hub_ready(proc: subprocess.Popen[bytes], timeout: float = HUB_START_S
              ) -> subprocess.Popen[bytes] | str:
    """The spawned hub once it listens, or why it does not (then it is killed)."""
    line = _first_line(proc, timeout)
    if not line.startswith("ready"):
        proc.kill()
        proc.wait(5)
        return line or f"the hub did not start within {timeout:g} s"
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



def spawn_hub_here(cfg: DistConfig, wc: WatchConfig, metrics: socket.socket | None = None
                   ) -> subprocess.Popen[bytes] | str:
    """Rank 0 spawns the watch's hub on MASTER_ADDR's own address (never every interface);
    why not when that cannot be."""
    from ddpnet.rendezvous import bind_address

    bind = bind_address(cfg)
    if not bind:
        if metrics is not None:
            metrics.close()
        return f"MASTER_ADDR {cfg.master_addr} is not an address of this host"
    return spawn_hub(cfg, wc, bind, metrics)


def metrics_socket(wc: WatchConfig, address: str) -> socket.socket | None:
    """Rank 0's metrics socket on the job's interface (``address``, net.select's), bound now
    so that a port in use stops the job at once: ConfigError (exit 2)."""
    from ddpnet.net.exposition import bind

    if wc.metrics_port is None:
        return None
    if not address:
        raise ConfigError(f"metrics port {wc.metrics_port}: no address of the job's interface "
                          f"on {socket.gethostname()} to serve it on",
                          "set MASTER_ADDR to an address of this host's interface, or "
                          "--ifname")
    return bind(address, wc.metrics_port, "metrics port")


def hub_ready_here(spawned: subprocess.Popen[bytes] | str | None
                   ) -> subprocess.Popen[bytes] | None:
    """The hub rank 0 spawned, once it listens; a warning and no hub when it does not."""
    started = spawned if spawned is None or isinstance(spawned, str) else hub_ready(spawned)
    if isinstance(started, str):
        sys.stderr.write(f"ddpnet: warning: rank 0 on {socket.gethostname()}: the watch's hub "
                         f"did not start: {started}\n")
        return None
    return started


# -- around the process group ------------------------------------------------------------------

@dataclass(frozen=True)
class Around:
    """What :func:`around_group` did: whether this rank is watched, and what it set."""

    watching: bool
    environ_set: Mapping[str, str]


#: how many :func:`around_group` calls are bringing a group up now: the attached
#: ``init_process_group`` (``watch.attach``) called inside one is the group it is already
#: watching, not a second one
_bringing_up = 0


def bringing_up() -> bool:
    return _bringing_up > 0


def around_group(cfg: DistConfig, wc: WatchConfig, init_group: Callable[[], None], *,
                 address: str, interface: str | None,
                 set_env: Callable[[Mapping[str, str]], None]) -> Around:
    """THE one way the watch starts around a process group, for ``ddpnet.init()`` and for a
    script's own ``init_process_group`` (``watch.attach``): before the group, size torch's
    Flight Recorder (through ``set_env``, unless the user did) and on rank 0 start the hub;
    then ``init_group()``; then connect this rank's heartbeat. A world of one, or the watch
    turned off, only runs ``init_group()``. The watch's own set-up never fails the group: a
    warning on stderr and no watch."""
    global _bringing_up
    watching = wc.enabled and cfg.world_size > 1
    to_set = torch_environ(os.environ) if watching else {}
    set_env(to_set)
    # the hub starts while the group comes up (its imports overlap the rendezvous); a
    # metrics port in use is the user's to fix, not a warning (bound here, not guarded)
    metrics = metrics_socket(wc, address) if watching and cfg.rank == 0 else None
    if wc.metrics_port is not None and not watching and cfg.rank == 0:
        sys.stderr.write(f"ddpnet: warning: metrics port {wc.metrics_port} not served: the "
                         "watch's hub serves it, and it is off (DDPNET_WATCH=0, or one rank)\n")
    spawned = _guarded(cfg, lambda: spawn_hub_here(cfg, wc, metrics)) \
        if watching and cfg.rank == 0 else None
    _bringing_up += 1
    try:
        init_group()
    except BaseException:
        if isinstance(spawned, subprocess.Popen):
            spawned.kill()
        raise
    finally:
        _bringing_up -= 1
    if watching:
        _guarded(cfg, lambda: start(cfg, wc, address, interface, spawned, cfg.master_addr))
    elif isinstance(spawned, subprocess.Popen):
        spawned.kill()
    return Around(watching, dict(to_set))


def _guarded(cfg: DistConfig, step: Callable[[], Any]) -> Any:
    """``step()``, or None and one warning line when the watch's own set-up fails."""
    try:
        return step()
    except Exception as exc:  # the watch must never be why a job does not start
        sys.stderr.write(f"ddpnet: warning: rank {cfg.rank} on {socket.gethostname()}: the "
                         f"watch is off: {short_error(type(exc).__name__, str(exc))}\n")
        return None


# -- this process ------------------------------------------------------------------------------

@contextlib.contextmanager
def uncaptured(stream: TextIO) -> Iterator[None]:
    """sys.stderr as the watch started while a rank waits for its verdict. torch's excepthook
    (set by ``init_process_group`` over ours) runs ours with sys.stderr swapped for a
    StringIO and prints it once ours returns; the verdict exits the process first, and the
    traceback and the verdict's line were lost (a stopped rank's exit 4 with an empty log)."""
    captured = sys.stderr
    if not isinstance(captured, io.StringIO) or captured is stream:
        yield
        return
    sys.stderr = stream
    try:
        yield
    finally:
        sys.stderr = captured


class Session:
    def __init__(self, recorder: Recorder, beacon: Beacon, undo: Callable[[], None],
                 hub: subprocess.Popen[bytes] | None, verdict_wait: float = 0.0) -> None:
        self.recorder, self.beacon, self.undo, self.hub = recorder, beacon, undo, hub
        self.previous_hook = sys.excepthook
        #: seconds a rank dying of a peer's failure waits for the verdict (0: never)
        self.verdict_wait = verdict_wait
        #: the thread connecting the heartbeat to the hub (:func:`start`)
        self.connecting: threading.Thread | None = None
        #: undoes the SIGTERM guard (``watch.termguard``)
        self.unguard: Callable[[], None] = lambda: None
        #: the error of a failing ``sys.exit`` (``watch.exitnote``): the goodbye carries it
        self.exit_error = ""

    def excepthook(self, kind: type[BaseException], exc: BaseException,
                   tb: TracebackType | None) -> None:
        # Ctrl-C and SIGTERM (errors.Terminated) are someone's intent, sent to every rank:
        # a goodbye, not a failure to report
        if not issubclass(kind, Exception):
            self.beacon.close("")
            self.previous_hook(kind, exc, tb)
            return
        error = short_error(kind.__name__, str(exc))
        if self.waits_for(kind, str(exc)):
            # the traceback first (the user's own context), then the verdict
            self.await_peer_verdict(error, lambda: self.previous_hook(kind, exc, tb))
            return
        self.beacon.close(error)
        self.previous_hook(kind, exc, tb)

    def waits_for(self, kind: type[BaseException], text: str) -> bool:
        """Whether this rank, dying of this exception, waits for the verdict: a peer's failure
        where the watch's action exits (``verdict_wait``)."""
        return self.verdict_wait > 0 and peer_failure(kind, text)

    def await_peer_verdict(self, error: str, before: Callable[[], None]) -> None:
        """This rank dies of a peer's failure: after ``before`` (its traceback), the verdict's
        one line and its exit code, from the heartbeat thread, when the hub names the cause;
        SIGTERM held from the first moment (torchrun and mp.spawn send it within 0.1 s of a
        peer dying). Without a verdict in ``verdict_wait`` s, the caller's own exit."""
        with termguard.holding(), uncaptured(self.beacon.stream):
            before()
            sys.stderr.write(f"ddpnet: watch: {error.split(':')[0]} from a peer; waiting "
                             f"up to {self.verdict_wait:.0f} s for the watch to name the "
                             "cause\n")
            sys.stderr.flush()
            self.beacon.await_verdict(error, self.verdict_wait)

    def exiting(self, error: str, handling: BaseException | None) -> None:
        """A failing ``sys.exit`` from the main thread (``watch.exitnote``). One called while
        a peer's failure is handled is that failure caught by a wrapper (mp.spawn's child,
        a framework's ``except Exception: sys.exit(1)``): the excepthook never sees it, so
        it waits for the verdict here, as the excepthook would have."""
        if os.getpid() != self.beacon.owner:  # a forked child's exit is not this rank's
            return
        self.exit_error = error
        if isinstance(handling, Exception) and self.waits_for(type(handling), str(handling)):
            self.await_peer_verdict(short_error(type(handling).__name__, str(handling)),
                                    lambda: None)

    def disown(self) -> None:
        """In a forked child: announce nothing, and give back the excepthook it inherited
        (the beacon refuses to speak there by itself: ``Beacon.owner``)."""
        self.recorder.announce = lambda _record: None
        self.beacon.forget_in_child()
        if sys.excepthook == self.excepthook:
            sys.excepthook = self.previous_hook

    def stop(self) -> None:
        # a job that ends while its rank still connects says goodbye once connected: else
        # the hub, never told, waits FIRST_RANK_S for ranks that are gone
        if self.connecting is not None:
            self.connecting.join(GOODBYE_WAIT_S)
        self.unguard()
        self.beacon.close(self.exit_error)
        self.undo()
        self.recorder.announce = lambda _record: None
        self.recorder.issued = lambda: 0
        if sys.excepthook == self.excepthook:
            sys.excepthook = self.previous_hook


_recorder = Recorder()
_session: Session | None = None


def recorder() -> Recorder:
    return _recorder


#: the longest a rank tries to reach the hub (in the background: nothing waits for it)
CONNECT_PATIENCE_S = HUB_START_S + 5.0
#: the longest a rank that ends waits for its connect to finish, to say goodbye
GOODBYE_WAIT_S = 10.0


def start(cfg: DistConfig, wc: WatchConfig, address: str, interface: str | None,
          spawned: subprocess.Popen[bytes] | str | None, hub_address: str) -> None:
    """Announce Python collectives and infer steps and phases (``watch.infer``) at once, then
    connect this rank's heartbeat to the hub in a thread of its own: the script goes on
    training while rank 0's hub (``spawned`` there) finishes starting. A warning on stderr
    (and no watch) when the hub cannot be reached."""
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
    except OSError as exc:
        beacon.close()
        sys.stderr.write(f"ddpnet: warning: rank {cfg.rank} on {host}: the watch is off: "
                         f"{exc}\n")
        return
    from ddpnet.watch import infer

    group = dist.distributed_c10d._get_default_group()
    unwrap = _recorder.wrap_collectives(dist, lambda: _next_seq(group))
    uninfer = infer.install(_recorder)  # steps and phases where the script marks none

    def note(error: str, handling: BaseException | None) -> None:
        session.exiting(error, handling)

    unexit = exitnote.note_exits(note)

    def undo() -> None:
        unwrap()
        uninfer()
        unexit()

    _recorder.issued = lambda: max(0, _next_seq(group) - 1)
    _recorder.backend = str(dist.get_backend())
    _recorder.announce = beacon.announce
    session = _session = Session(_recorder, beacon, undo, None,
                                 verdict_wait=min(wc.timeout or VERDICT_WAIT_S, VERDICT_WAIT_S)
                                 if wc.action == "exit"
                                 else 0.0)
    sys.excepthook = session.excepthook
    if session.verdict_wait > 0:
        session.unguard = termguard.install(beacon.verdict_within)
    settle.register()  # first, if the boot did not: it runs after stop
    atexit.register(stop)
    session.connecting = threading.Thread(target=_connect, name="ddpnet-watch-connect",
                                          args=(session, cfg, wc, spawned, hub_address),
                                          daemon=True)
    session.connecting.start()


def _connect(session: Session, cfg: DistConfig, wc: WatchConfig,
             spawned: subprocess.Popen[bytes] | str | None, hub_address: str) -> None:
    """The background half of :func:`start`: rank 0 collects its hub, every rank connects."""
    session.hub = hub_ready_here(spawned)
    port = hub_port(cfg, wc)
    try:
        session.beacon.connect(hub_address, port, token=job_token(cfg),
                               patience=CONNECT_PATIENCE_S)
    except OSError as exc:
        session.beacon.close()
        sys.stderr.write(f"ddpnet: warning: rank {cfg.rank} on {socket.gethostname()}: the "
                         f"watch is off: no hub at {hub_address}:{port} ({exc})\n")


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


def _forget_in_child() -> None:
    """A forked child (a DataLoader worker, a raw ``os.fork()``) is not its parent's rank:
    it has no session, so its exit (``atexit``: :func:`stop`) says goodbye for nobody."""
    global _session
    session, _session = _session, None
    if session is not None:
        session.disown()


os.register_at_fork(after_in_child=_forget_in_child)


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
