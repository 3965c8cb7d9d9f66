"""The check's store protocol over torch's c10d TCPStore (edge).

Rank 0 hosts the store on MASTER_PORT; every rank publishes what it sees under its own keys
(``STAGE/RANK``) and counts itself in ``STAGE/n``, so store keys per rank are O(1) per stage.
Rank 0 gathers by polling one counter; the other ranks wait for rank 0's decision keys.
Every wait is bounded and waits in short slices, so Ctrl-C is answered within one slice
(torch's wait blocks in C++ where Python cannot see the signal).
"""

from __future__ import annotations

import contextlib
import errno
import json
import queue
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from ddpnet.check.options import CheckOptions
from ddpnet.config import DistConfig
from ddpnet.errors import RendezvousError
from ddpnet.net.ports import listen_socket
from ddpnet.net.probe import classify_bind
from ddpnet.net.relay import Relay
from ddpnet.rendezvous import wait_slice

PREFIX = "ddpnet/check/"
#: the longest single wait on the store: how late Ctrl-C may be seen
WAIT_SLICE = 0.5
#: how often rank 0 looks at a counter while gathering
POLL = 0.02
#: how far past its own timeout a call on a joined store may run before the store counts
#: as gone. torch's client has no bound of its own once the master's packets stop arriving
#: (a wait that timed out sends STOP_WAITING and reads its answer with no timeout): a
#: duplicate address or a link that died after the join would hold a rank for good.
STALL_S = 15.0

T = TypeVar("T")


def stall_for(world: int) -> float:
    """How long past its own timeout a call may run before the store counts as gone (pure):
    :data:`STALL_S`, and from 1,500 ranks up N/100 s. Rank 0's one store thread answers a
    herd of N joins in O(N): at 4,096 simulated ranks calls took over 15 s and ranks that
    were only waiting their turn were given up (`missing-ranks`)."""
    return max(STALL_S, world / 100)



class StageTimeout(Exception):
    """A bounded wait on the store ran out (its message is the key waited for)."""


#: keys read in one round trip when rank 0 gathers a stage
CHUNK = 512


def _STOP() -> None:
    """The job that ends a store's call thread."""


def _serve(jobs: queue.SimpleQueue[Callable[[], None]]) -> None:
    while (job := jobs.get()) is not _STOP:
        job()


class Store:
    """Keys under :data:`PREFIX`, JSON values, bounded waits in slices of ``slice_s``."""

    def __init__(self, raw: Any, slice_s: float = WAIT_SLICE, *, bounded: bool = False,
                 stall_s: float = STALL_S) -> None:
        self.raw = raw
        self.slice_s = slice_s
        #: ranks > 0 (a remote store) run each call in a thread they stop waiting for
        self.bounded = bounded
        self.stall_s = stall_s
        #: a bounded call ran out: every later call fails at once
        self.gone = False
        #: a bounded store's calls, run one at a time by one thread of its own (torch's
        #: client serializes them anyway); a thread per call cost 4,096 ranks a thread
        #: start per store poll
        self._jobs: queue.SimpleQueue[Callable[[], None]] | None = None

    def _call(self, what: str, call: Callable[..., T], *args: Any,
              timeout: float = WAIT_SLICE) -> T:
        """``call(*args)`` on the raw store, given up after ``timeout`` + :data:`STALL_S` on a
        remote store (StageTimeout, and the store counts as gone)."""
        if not self.bounded:
            return call(*args)
        if self.gone:
            raise StageTimeout(f"{what} (rank 0's store stopped answering)")
        box: list[tuple[bool, Any]] = []
        done = threading.Event()

        def run() -> None:
            try:
                box.append((True, call(*args)))
            except BaseException as exc:  # handed to the caller's thread
                box.append((False, exc))
            finally:
                done.set()

        if self._jobs is None:
            self._jobs = queue.SimpleQueue()
            threading.Thread(target=_serve, args=(self._jobs,), name="ddpnet-check-store",
                             daemon=True).start()
        self._jobs.put(run)
        if not done.wait(timeout + self.stall_s):
            self.gone = True
            raise StageTimeout(f"{what} (rank 0's store stopped answering for "
                               f"{timeout + self.stall_s:g} s)")
        ok, value = box[0]
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    def close(self) -> None:
        """Stop the call thread (a thread stuck in a call stays until the process ends)."""
        if self._jobs is not None:
            self._jobs.put(_STOP)

    def key(self, name: str) -> str:
        return PREFIX + name

    def set(self, name: str, value: Any) -> None:
        self._call(name, self.raw.set, self.key(name), json.dumps(value))

    def set_many(self, values: dict[str, Any]) -> None:
        """Set every key at once: one round trip however many keys (rank 0 giving each of
        N ranks its own small key instead of one big key every rank reads)."""
        if values:
            self._call("many keys", self.raw.multi_set, [self.key(k) for k in values],
                       [json.dumps(v) for v in values.values()])

    def get_now(self, name: str) -> Any:
        """The value of ``name`` if it is set now, else None (no wait)."""
        return json.loads(self._raw_get(name)) if self.has(name) else None

    def has(self, name: str) -> bool:
        return bool(self._call(name, self.raw.check, [self.key(name)]))

    def add(self, name: str, amount: int = 1) -> int:
        return int(self._call(name, self.raw.add, self.key(name), amount))

    def count(self, name: str) -> int:
        return self.add(name, 0)

    def get(self, name: str, timeout: float) -> Any:
        """The value of ``name`` once it is set; StageTimeout after ``timeout`` seconds."""
        from torch.distributed import DistStoreError

        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            wait = max(min(left, self.slice_s), 0.01)
            try:
                self._call(name, self.raw.wait, [self.key(name)], timedelta(seconds=wait),
                           timeout=wait)
                break
            except DistStoreError as exc:  # this slice timed out
                if time.monotonic() >= deadline:
                    raise StageTimeout(name) from exc
            except StageTimeout:
                raise
            except Exception as exc:  # the store is gone (rank 0 died)
                raise StageTimeout(name) from exc
        return json.loads(self._raw_get(name))

    def _raw_get(self, name: str) -> Any:
        return self._call(name, self.raw.get, self.key(name))

    def publish(self, stage: str, rank: int, value: Any) -> None:
        self.set(f"{stage}/{rank}", value)
        self.add(f"{stage}/n")

    def wait_count(self, name: str, want: int, timeout: float) -> int:
        """Poll counter ``name`` until it reaches ``want`` or ``timeout`` passes; its value."""
        deadline = time.monotonic() + timeout
        n = self.count(name)
        while n < want and time.monotonic() < deadline:
            time.sleep(POLL)
            n = self.count(name)
        return n

    def gather(self, stage: str, ranks: list[int], timeout: float) -> dict[int, Any]:
        """Rank 0: wait (bounded) until every rank in ``ranks`` published; O(1) polling."""
        self.wait_count(f"{stage}/n", len(ranks), timeout)
        got = self.get_many([f"{stage}/{r}" for r in ranks])
        return {r: got[f"{stage}/{r}"] for r in ranks if f"{stage}/{r}" in got}

    def get_many(self, names: list[str]) -> dict[str, Any]:
        """The values of those of ``names`` that are set, by name: one round trip per
        :data:`CHUNK` keys when all of a chunk's are set, one per key otherwise."""
        out: dict[str, Any] = {}
        for i in range(0, len(names), CHUNK):
            chunk = names[i:i + CHUNK]
            keys = [self.key(n) for n in chunk]
            if self._call(chunk[0], self.raw.check, keys):
                values = self._call(chunk[0], self.raw.multi_get, keys)
                out.update({n: json.loads(v) for n, v in zip(chunk, values, strict=True)})
                continue
            for n in chunk:
                value = self.get_now(n)
                if value is not None:
                    out[n] = value
        return out


# ----------------------------------------------------------------------------- opening it

def bind_error(cfg: DistConfig, host: str, detail: str = "") -> RendezvousError:
    """``port-in-use``, explained by what holds MASTER_PORT (a listener or a connection)."""
    from ddpnet.net.probe import who_holds

    return who_holds(cfg, host, detail or "EADDRINUSE")


@dataclass
class EarlyListen:
    """Rank 0's listening socket on MASTER_PORT (``fd``, taken over by the store) and the
    relays from the other family's addresses; ``close()`` at the end of the check."""

    fd: int | None
    relays: tuple[Relay, ...] = ()

    def close(self) -> None:
        for relay in self.relays:
            relay.close()


def listen_early(cfg: DistConfig, host: str) -> EarlyListen:
    """Rank 0 binds MASTER_PORT before importing torch, so early ranks connect instead of
    being refused; the fd goes to TCPStore(master_listen_fd=...). It listens on
    MASTER_ADDR's own address only (the store is unauthenticated: never on every interface)
    and relays the port from the other family's addresses of that interface, so a worker
    whose MASTER_ADDR resolves to IPv6 still joins and the facts show the family mismatch.
    Only a MASTER_ADDR that is not this host's (a VIP, a NAT) leaves it on every interface."""
    from ddpnet.rendezvous import bind_address

    if cfg.world_size <= 1:
        return EarlyListen(None)
    own = bind_address(cfg)
    try:
        if not own:
            return EarlyListen(_listen_everywhere(cfg))
        sock = listen_socket(own, cfg.master_port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise bind_error(cfg, host, str(exc)) from None
        if exc.errno == errno.EACCES:
            raise classify_bind(exc, cfg.master_port, host=host, rank=0) from None
        raise
    return EarlyListen(int(sock.detach()), _relays(own, cfg.master_port))


def _listen_everywhere(cfg: DistConfig) -> int | None:
    v6_only = ":" in cfg.master_addr
    for family, wildcard in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        if family == socket.AF_INET and v6_only:
            continue
        try:
            return int(_listen(family, wildcard, cfg.master_port).detach())
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                raise
    return None


def _relays(own: str, port: int) -> tuple[Relay, ...]:
    """Relays of ``port`` from the other family's (non-link-local) addresses of the
    interface that owns ``own``; best effort: an address that cannot listen is skipped."""
    from ddpnet.net.interfaces import list_interfaces

    family = 6 if ":" in own else 4
    relays = []
    for iface in list_interfaces():
        if not iface.owns(own):
            continue
        for addr in iface.addresses:
            if addr.family != family and not addr.is_link_local and not addr.is_loopback:
                with contextlib.suppress(OSError):
                    relays.append(Relay(addr.ip, port, own, port))
    return tuple(relays)


def _listen(family: socket.AddressFamily, wildcard: str, port: int) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((wildcard, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


def host_store(cfg: DistConfig, opts: CheckOptions, host: str,
               listen_fd: int | None = None) -> Store:
    """Rank 0 hosts the store on MASTER_PORT (on the early socket when there is one)."""
    import torch.distributed as dist

    kwargs: dict[str, Any] = {"wait_for_workers": False}
    if listen_fd is not None:
        kwargs["master_listen_fd"] = listen_fd
    try:
        return Store(dist.TCPStore(  # type: ignore[attr-defined]
            cfg.master_addr, cfg.master_port, None, True,
            timedelta(seconds=opts.stage_timeout), **kwargs))
    except Exception as exc:
        text = str(exc)
        if "in use" in text or "EADDRINUSE" in text or "errno: 98" in text:
            raise bind_error(cfg, host, _first_line(exc)) from None
        raise RendezvousError(
            "master-no-route",
            f"rank 0 cannot host the store on {cfg.master_addr}:{cfg.master_port}: "
            f"{_first_line(exc)}",
            "MASTER_ADDR must be an address of rank 0's node",
            host=host, rank=0) from None


def join_store(cfg: DistConfig, opts: CheckOptions, host: str) -> Store:
    """Ranks > 0 connect to rank 0's store."""
    import torch.distributed as dist

    try:
        return Store(dist.TCPStore(  # type: ignore[attr-defined]
            cfg.master_addr, cfg.master_port, None, False,
            timedelta(seconds=max(opts.connect_timeout * 3, 5.0))),
            wait_slice(cfg.world_size, WAIT_SLICE), bounded=True,
            stall_s=stall_for(cfg.world_size))
    except Exception as exc:
        from ddpnet.net.probe import duplicate_of_master

        twin = duplicate_of_master(cfg, host)
        if twin is not None:
            raise twin from None
        raise RendezvousError(
            "master-port-refused",
            f"rank {cfg.rank} on {host} could not join the store at "
            f"{cfg.master_addr}:{cfg.master_port}: {_first_line(exc)}",
            "start rank 0 first and use the same MASTER_ADDR/MASTER_PORT everywhere",
            host=host, rank=cfg.rank) from None
