"""The watch of one process (``ddpnet.init()`` starts it, ``ddpnet.shutdown()`` ends it), and the
public ``ddpnet.phase()`` / ``ddpnet.step()``."""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ddpnet.config import DistConfig
from ddpnet.errors import ConfigError, short_error
from ddpnet.watch import dying
from ddpnet.watch.heartbeat import Beacon
from ddpnet.watch.recorder import Recorder
from ddpnet.watch.settings import WatchConfig, hub_port, job_token, torch_environ
from ddpnet.watch.state import LONG_PHASES, RankState

# -- the hub (rank 0) --------------------------------------------------------------------------

#: the longest rank 0 waits for its hub to say it listens
HUB_START_S = 15.0


def spawn_hub(cfg: DistConfig, wc: WatchConfig, bind: str,
              metrics: socket.socket | None = None) -> subprocess.Popen[bytes]:
    """Start the hub process on ``bind`` without waiting (:func:`hub_ready` collects it);
    ``metrics``: the socket it serves metrics on (this process's copy is closed once passed)."""
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
    # a session of its own: torchrun's killpg must not take the hub before it names who died
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


def spawn_hub_here(cfg: DistConfig, wc: WatchConfig, metrics: socket.socket | None = None
                   ) -> subprocess.Popen[bytes] | str:
    """The hub on MASTER_ADDR's own address (never every interface), or why not."""
    from ddpnet.rendezvous import bind_address

    bind = bind_address(cfg)
    if not bind:
        if metrics is not None:
            metrics.close()
        return f"MASTER_ADDR {cfg.master_addr} is not an address of this host"
    return spawn_hub(cfg, wc, bind, metrics)


def metrics_socket(wc: WatchConfig, address: str) -> socket.socket | None:
    """Rank 0's metrics socket, bound now so that a port in use stops the job (ConfigError, exit
    2)."""
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
#: ``init_process_group`` called inside one is that group, not a second one
_bringing_up = 0


def bringing_up() -> bool:
    return _bringing_up > 0


def around_group(cfg: DistConfig, wc: WatchConfig, init_group: Callable[[], None], *,
                 address: str, interface: str | None,
                 set_env: Callable[[Mapping[str, str]], None]) -> Around:
    """The one way the watch starts around a process group (``ddpnet.init()`` and ``watch.attach``):
    Flight Recorder, rank 0's hub, ``init_group()``, the heartbeat. Its own failures only warn."""
    global _bringing_up
    watching = wc.enabled and cfg.world_size > 1
    to_set = torch_environ(os.environ) if watching else {}
    set_env(to_set)
    # a metrics port in use is the user's to fix, not a warning (bound here, not guarded)
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
        _off(cfg, short_error(type(exc).__name__, str(exc)))
        return None


def _off(cfg: DistConfig, why: str) -> None:
    sys.stderr.write(f"ddpnet: warning: rank {cfg.rank} on {socket.gethostname()}: the "
                     f"watch is off: {why}\n")


class Session:
    def __init__(self, recorder: Recorder, beacon: Beacon, undo: Callable[[], None],
                 hub: subprocess.Popen[bytes] | None, verdict_wait: float = 0.0) -> None:
        self.recorder, self.beacon, self.undo, self.hub = recorder, beacon, undo, hub
        self.ending = dying.Ending(beacon, verdict_wait)
        #: the thread connecting the heartbeat to the hub (:func:`start`)
        self.connecting: threading.Thread | None = None

    def disown(self) -> None:
        """In a forked child: announce nothing, and give back the excepthook it inherited."""
        self.recorder.announce = lambda _record: None
        self.beacon.forget_in_child()
        self.ending.disown()

    def stop(self) -> None:
        # a job that ends while its rank still connects says goodbye once connected
        if self.connecting is not None:
            self.connecting.join(GOODBYE_WAIT_S)
        self.ending.close()
        self.undo()
        self.recorder.announce = lambda _record: None
        self.recorder.issued = lambda: 0


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
    """Announce collectives and infer steps at once, then connect the heartbeat in its own
    thread."""
    import torch.distributed as dist

    global _session
    if not dist.is_initialized():  # no default group (init_process_group stubbed): no watch
        return
    ident = RankState(rank=cfg.rank, world_size=cfg.world_size, host=socket.gethostname(),
                      pid=os.getpid(), interface=interface or "", address=address)
    beacon = Beacon(_recorder, ident, wc.directory, override=wc.timeout)
    try:
        beacon.open_ports(gloo=dist.get_backend() == "gloo", exclude=(cfg.master_port,))
    except OSError as exc:
        beacon.close()
        _off(cfg, str(exc))
        return
    from ddpnet.watch import infer

    group = dist.distributed_c10d._get_default_group()
    unwrap = _recorder.wrap_collectives(dist, lambda: _next_seq(group))
    uninfer = infer.install(_recorder)  # steps and phases where the script marks none

    def undo() -> None:
        unwrap()
        uninfer()

    _recorder.issued = lambda: max(0, _next_seq(group) - 1)
    _recorder.backend = str(dist.get_backend())
    _recorder.announce = beacon.announce
    wait = min(wc.timeout or dying.VERDICT_WAIT_S, dying.VERDICT_WAIT_S) \
        if wc.action == "exit" else 0.0
    session = _session = Session(_recorder, beacon, undo, None, verdict_wait=wait)
    session.ending.install()  # before the goodbye's atexit: the settle runs after it
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
        _off(cfg, f"no hub at {hub_address}:{port} ({exc})")


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
    """A forked child (a DataLoader worker) says no goodbye for its parent's rank."""
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
    """The stall threshold this rank last heard from the hub, or None when not watched."""
    session = _session
    return None if session is None else session.beacon.threshold.to_dict()


# -- the public API ----------------------------------------------------------------------------

class _Phase(contextlib.AbstractContextManager["_Phase"]):
    """``ddpnet.phase("data")`` marks the phase; as a context manager it restores the previous
    one."""

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
    """Mark this rank's training phase ("data", "forward", "backward", "step", ...); cheap.

    ``with ddpnet.phase("checkpoint"):`` (or "eval", "warmup") marks a phase that may keep the other
    ranks waiting long: the watchdog gives it its own allowance."""
    return _Phase(name)


def step(n: int) -> None:
    """Mark the start of training step ``n`` (its time feeds the straggler analysis)."""
    _recorder.set_step(int(n))
