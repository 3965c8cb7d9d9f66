"""The rendezvous store ``ddpnet.init()`` brings the group up on (edge: torch's TCPStore).

torch's own ``env://``/``tcp://`` path has rank 0 listen on every interface and wait for
the others as long as the group's timeout (30 min for gloo), then blame nobody. Here rank 0
listens on MASTER_ADDR's own address, every rank registers, and when a rank has not joined
within ``join_timeout`` every rank that did is told which ones are missing, in seconds.
Not used under torchrun's agent store (the agent already did the rendezvous) or ``file://``.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from ddpnet.config import DistConfig
from ddpnet.errors import RendezvousError
from ddpnet.output import exit_now, format_error

JOINED = "ddpnet/joined"
GO = "ddpnet/go"
_RANK = "ddpnet/rank/"
#: rank 0's WORLD_SIZE (set before anyone can join) and the first problem a rank saw
#: ("cause\nmessage": another WORLD_SIZE, a RANK used twice)
WORLD0 = "ddpnet/world0"
PROBLEM = "ddpnet/problem"
#: "rank\nhost\nerror" of the first rank whose init_process_group failed (gloo's full mesh
#: keeps the others waiting for it up to the group's timeout)
GROUP_FAILED = "ddpnet/group-failed"
_SEEN = "ddpnet/seen/"
#: how long a store wait blocks at once (C++ waits do not see Ctrl-C)
_SLICE_S = 0.25
#: at most this many missing ranks are named in the message (1000-node jobs)
_NAMED = 8


def wait_slice(world: int, shortest: float = _SLICE_S) -> float:
    """How long one store wait (or poll) of a rank blocks in a job of ``world`` ranks:
    ``shortest``, and from 1,000 ranks up N/1000 s (at most 5 s), so that rank 0's store
    answers a bounded number of requests a second whatever N (2N a slice: 32,000 a second
    from 4,096 ranks polling every 0.25 s starved the rendezvous); Ctrl-C and a peer's
    failure are seen within one slice (pure)."""
    return min(5.0, max(shortest, world / 1000))


def own_store(cfg: DistConfig, environ: Mapping[str, str]) -> bool:
    """True when init() hosts the store itself: a tcp rendezvous torchrun's agent does not
    host already."""
    agent = environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    return not cfg.init_method.startswith("file://") and not agent


def missing_message(cfg: DistConfig, host: str, missing: list[int], waited: float) -> str:
    """What rank 0 (and every rank that joined) reports (pure)."""
    shown = ", ".join(str(r) for r in missing[:_NAMED])
    more = f" and {len(missing) - _NAMED} more" if len(missing) > _NAMED else ""
    where = ""
    if cfg.hosts and all(0 <= r < cfg.world_size for r in missing):
        per_node = max(1, cfg.world_size // max(1, len(cfg.hosts)))
        nodes = sorted({cfg.hosts[min(r // per_node, len(cfg.hosts) - 1)] for r in missing})
        where = f" (expected on {', '.join(nodes[:_NAMED])})"
    return (f"{len(missing)} of {cfg.world_size} ranks did not join the rendezvous at "
            f"{cfg.master_addr}:{cfg.master_port} within {waited:g} s: rank(s) {shown}{more}"
            f"{where}; seen from rank {cfg.rank} on {host}")


MISSING_HINT = ("start every rank with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE; on the "
                "missing node run `ddpnet doctor`, or `ddpnet check` on all nodes; if ranks "
                "start minutes apart, raise init(join_timeout=...)")


WORLD_HINT = ("export the same WORLD_SIZE on every node (or pass the same --nnodes / "
              "--nproc-per-node to the launcher everywhere)")
_HINTS = {"world-size-mismatch": WORLD_HINT,
          "duplicate-rank": "give every process its own RANK (0..WORLD_SIZE-1): with a "
                            "launcher, the same --node-rank on two nodes does this"}


def world_message(cfg: DistConfig, host: str, world0: int, host0: str) -> str | None:
    """Why this rank cannot be part of rank 0's group (pure): another WORLD_SIZE, or a RANK
    outside rank 0's 0..WORLD_SIZE-1. None when it agrees."""
    if world0 == cfg.world_size and 0 <= cfg.rank < world0:
        return None
    return (f"rank {cfg.rank} on {host} has WORLD_SIZE={cfg.world_size}, rank 0 on {host0} "
            f"WORLD_SIZE={world0}: the group would wait for ranks that never come (torch "
            f"hangs for its whole timeout)")


def open_store(cfg: DistConfig, host: str, timeout: float, join_timeout: float) -> Any:
    """Rank 0 hosts the store on MASTER_ADDR's address; the rest connect; then everyone
    waits (bounded) until all ``world_size`` ranks have joined."""
    import torch.distributed as dist

    if cfg.rank == 0:
        store = _host(cfg, host, timeout)
        store.set(WORLD0, f"{cfg.world_size} {host}")
    else:
        store = dist.TCPStore(cfg.master_addr, cfg.master_port, cfg.world_size, False,  # type: ignore[attr-defined]
                              timedelta(seconds=timeout))
        _agree(store, cfg, host, join_timeout)
    store.set(f"{_RANK}{cfg.rank}", host)
    store.add(JOINED, 1)
    if cfg.rank == 0:
        _lead(store, cfg, host, join_timeout)
    else:
        _follow(store, cfg, host, join_timeout)
    return store


def bind_address(cfg: DistConfig) -> str:
    """Where rank 0's store listens: MASTER_ADDR's own address on this host (``""``, every
    interface, only when MASTER_ADDR is not one of this host's addresses). ``ddpnet check``
    listens here too and relays the port from the other family's addresses of the same
    interface, so that a worker that reaches it over the other family is seen and named
    (``family-mismatch``)."""
    from ddpnet.net.interfaces import list_interfaces
    from ddpnet.net.names import resolve_host
    from ddpnet.net.ports import store_address

    local = frozenset(a.ip for i in list_interfaces() for a in i.addresses)
    return store_address(resolve_host(cfg.master_addr, timeout=5.0).addresses, local)


def _host(cfg: DistConfig, host: str, timeout: float) -> Any:
    import torch.distributed as dist

    from ddpnet.net.ports import listen_socket
    from ddpnet.net.probe import classify_bind

    try:
        sock = listen_socket(bind_address(cfg), cfg.master_port)
    except OSError as exc:
        raise classify_bind(exc, cfg.master_port, host=host, rank=cfg.rank) from None
    return dist.TCPStore(cfg.master_addr, cfg.master_port, cfg.world_size, True,  # type: ignore[attr-defined]
                         timedelta(seconds=timeout), wait_for_workers=False,
                         master_listen_fd=sock.detach())


def _agree(store: Any, cfg: DistConfig, host: str, join_timeout: float) -> None:
    """Any other rank, before it joins: its WORLD_SIZE and RANK fit rank 0's and no other
    process took its RANK, or it tells rank 0 (which stops everyone at once) and raises
    ``world-size-mismatch`` / ``duplicate-rank`` itself."""
    try:
        store.wait([WORLD0], timedelta(seconds=join_timeout))
    except Exception:  # an older rank 0 (no key): the join count decides as before
        return
    world0, _, host0 = store.get(WORLD0).decode().partition(" ")
    message = world_message(cfg, host, int(world0), host0)
    if message is not None:
        _report(store, cfg, host, "world-size-mismatch", message)
    if int(store.add(f"{_SEEN}{cfg.rank}", 1)) > 1:
        first = store.get(f"{_RANK}{cfg.rank}").decode() if store.check(
            [f"{_RANK}{cfg.rank}"]) else "another process"
        _report(store, cfg, host, "duplicate-rank",
                f"RANK={cfg.rank} is used twice: on {host} and on {first}; the group would "
                f"count one rank twice and wait for its whole timeout")


def _report(store: Any, cfg: DistConfig, host: str, cause: str, message: str) -> None:
    """Tell rank 0 (which stops everyone at once) and raise it here."""
    store.set(PROBLEM, f"{cause}\n{message}")
    raise RendezvousError(cause, message, _HINTS[cause], host=host, rank=cfg.rank)


def _problem(store: Any) -> tuple[str, str] | None:
    if not store.check([PROBLEM]):
        return None
    cause, _, message = store.get(PROBLEM).decode().partition("\n")
    return cause, message


def _stop_on_mismatch(store: Any, cfg: DistConfig, host: str) -> None:
    problem = _problem(store)
    if problem is None:
        return
    cause, message = problem
    store.set(GO, "stop:" + message)
    time.sleep(0.5)  # let the ranks that joined read why before the store goes
    raise RendezvousError(cause, f"{message}; seen from rank 0 on {host}",
                          _HINTS.get(cause, MISSING_HINT), host=host, rank=cfg.rank)


def _lead(store: Any, cfg: DistConfig, host: str, join_timeout: float) -> None:
    """Rank 0: wait for every rank, then say go; or name the missing ones (or the one whose
    WORLD_SIZE differs) and say stop."""
    start = time.monotonic()
    while int(store.add(JOINED, 0)) < cfg.world_size:
        _stop_on_mismatch(store, cfg, host)
        if time.monotonic() - start > join_timeout:
            missing = [r for r in range(cfg.world_size) if not store.check([f"{_RANK}{r}"])]
            message = missing_message(cfg, host, missing, join_timeout)
            store.set(GO, "stop:" + message)
            time.sleep(0.5)  # let the ranks that joined read why before the store goes
            raise RendezvousError("missing-ranks", message, MISSING_HINT, host=host,
                                  rank=cfg.rank, detail=",".join(map(str, missing)))
        time.sleep(0.05)
    store.set(GO, "go")


def _follow(store: Any, cfg: DistConfig, host: str, join_timeout: float) -> None:
    """Any other rank: wait for rank 0's word (a little longer than rank 0 waits). It polls
    with ``check`` (one short request a slice) rather than blocking in ``wait`` slices: each
    slice a wait timed out printed torch's C++ ``waitForInput ... timed out after 250ms``
    twice on the rank's stderr (``bench --local 4``: eight lines before the first row)."""
    deadline = time.monotonic() + join_timeout + 10.0
    while True:
        try:
            if store.check([GO]):
                break
        except Exception as exc:  # torch: a closed or unreachable store
            raise RendezvousError(
                "missing-ranks",
                f"rank {cfg.rank} on {host} joined the rendezvous at {cfg.master_addr}:"
                f"{cfg.master_port} but lost rank 0's store before it said every rank had "
                f"joined ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})",
                MISSING_HINT, host=host, rank=cfg.rank) from None
        if time.monotonic() > deadline:
            raise RendezvousError(
                "missing-ranks",
                f"rank {cfg.rank} on {host} joined the rendezvous at {cfg.master_addr}:"
                f"{cfg.master_port} but rank 0 never said every rank had joined "
                f"(waited {join_timeout + 10.0:g} s)", MISSING_HINT, host=host, rank=cfg.rank)
        time.sleep(wait_slice(cfg.world_size))
    word = store.get(GO).decode()
    if word.startswith("stop:"):
        problem = _problem(store)
        if problem is not None:
            raise RendezvousError(problem[0], word[5:], _HINTS.get(problem[0], MISSING_HINT),
                                  host=host, rank=cfg.rank)
        raise RendezvousError("missing-ranks", word[5:], MISSING_HINT, host=host,
                              rank=cfg.rank)


# -- while the group forms -------------------------------------------------------------------

def report_group_failure(store: Any, cfg: DistConfig, host: str, error: str) -> str | None:
    """This rank's init_process_group failed: tell the others (best effort), so that the
    ranks still waiting in gloo's full mesh for it stop now. The first report stays (a
    compare-and-set): a rank that failed because another had already left (its port now
    refuses) must not hide the first cause. Returns that earlier report when another rank's
    came first, else None. Rank 0 hosts the store: it waits a moment so they can read why
    before the store goes."""
    mine = f"{cfg.rank}\n{host}\n{error}"
    try:
        now = store.compare_set(GROUP_FAILED, "", mine)
    except Exception:  # the store is gone too: nothing to tell
        return None
    if cfg.rank == 0:
        time.sleep(2 * _SLICE_S + 0.5)
    raw = now.decode(errors="replace") if isinstance(now, bytes) else str(now)
    return None if raw == mine else raw


def _parse_failure(raw: str) -> tuple[str, str, str] | None:
    """(rank, host, error) of a GROUP_FAILED value; None when malformed."""
    rank, _, rest = raw.partition("\n")
    peer_host, _, error = rest.partition("\n")
    return (rank, peer_host, error) if rank.isdigit() else None


def group_failed_message(cfg: DistConfig, host: str, raw: str,
                         own: str | None = None) -> str | None:
    """The line of a rank that learns another rank's group set-up failed (pure): one still
    waiting for it, or (``own``: this rank's own error) one whose own set-up failed after
    it, a refused or reset connection to the rank that left: the first failure is the
    cause, this one its consequence. None for this rank's own report or a malformed value."""
    parsed = _parse_failure(raw)
    if parsed is None or int(parsed[0]) == cfg.rank:
        return None
    rank, peer_host, error = parsed
    head = (f"rank {cfg.rank} on {host}: the process group cannot form: rank {rank} on "
            f"{peer_host} failed to connect to its peers")
    if own is None:
        return (f"{head} ({error[:300]}), so the ranks waiting for it would wait for the "
                f"group's whole timeout")
    return (f"{head} first ({error[:300]}); this rank's own failure followed from it "
            f"({own[:200]})")


GROUP_HINT = ("the ranks reach the store but not each other's advertised addresses: a NAT, "
              "VIP or port forward between nodes, another subnet without a route, or a "
              "firewall on ephemeral ports; run `ddpnet check` on every node to name the pair")


class GroupGuard:
    """While ``init_process_group`` forms the group (C++ that Python cannot interrupt),
    check the store, over a client connection of its own (one short request per ``poll``
    seconds: N more connections and 4N requests a second on rank 0's store while the group
    forms, usually well under a second), for another rank's failure, and stop this process
    at once with that rank's cause and exit 1. The thread is joined before init() returns.
    A store that goes away ends the guard quietly."""

    def __init__(self, cfg: DistConfig, host: str, *, poll: float | None = None,
                 exit_now: Callable[[int], None] = exit_now) -> None:
        self.cfg, self.host, self.exit_now = cfg, host, exit_now
        #: 0.25 s, longer from 1,000 ranks up (``wait_slice``): 4N checks a second otherwise
        self.poll = poll if poll is not None else wait_slice(cfg.world_size)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="ddpnet-group-guard",
                                       daemon=True)

    def __enter__(self) -> GroupGuard:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        # gone before init() returns: a thread inside a C++ store call at interpreter exit
        # aborts the process ("terminate called without an active exception")
        self.done.set()
        self.thread.join(timeout=self.poll + 11.0)

    def _run(self) -> None:
        import torch.distributed as dist

        try:
            store = dist.TCPStore(self.cfg.master_addr, self.cfg.master_port,  # type: ignore[attr-defined]
                                  self.cfg.world_size, False, timedelta(seconds=10))
            while not self.done.wait(self.poll):
                if store.check([GROUP_FAILED]):  # one short request, never a blocking wait
                    line = group_failed_message(self.cfg, self.host,
                                                store.get(GROUP_FAILED).decode(errors="replace"))
                    if line is not None and not self.done.is_set():
                        sys.stderr.write(format_error(line, GROUP_HINT) + "\n")
                        self.exit_now(1)
                    return
        except Exception:  # the store is gone: nothing more to learn from it
            return
