"""The hub's state store: every rank's last state and when this hub received it (its own clock), who
left, the snapshot the decisions read, and the probe rounds. The transport
(:class:`ddpnet.watch.hub.Hub`) feeds it and owns the connections."""

from __future__ import annotations

import json
import selectors
import socket
import time
from dataclasses import dataclass, field, replace
from typing import Any

from ddpnet.watch import network, termination
from ddpnet.watch.channel import Checks
from ddpnet.watch.metrics import Probed
from ddpnet.watch.probe import PROBE_TIMEOUT_S, STREAM, probe_request
from ddpnet.watch.state import (
    FINISHED,
    PEER_FAILED,
    CollectiveRecord,
    Diagnosis,
    LinkProbe,
    RankState,
    Snapshot,
)
from ddpnet.watch.threshold import period_for
from ddpnet.watch.transport import Outbox
from ddpnet.watch.watchdog import Settings, Watchdog
from ddpnet.watch.wire import Lines

#: with metrics on, the longest the hub stays after a verdict for a scrape to see it
METRICS_LINGER_S = 60.0
#: a probe round's trigger when it only measures the links for the metrics
LINKS = "links"
#: how long the hub waits for every rank's probes
PROBE_WAIT_S = 3 * PROBE_TIMEOUT_S + 2.0
#: with metrics on, seconds from every rank's first state to the first link round
FIRST_LINKS_S = 5.0


@dataclass(frozen=True)
class HubOptions:
    bind: str
    port: int
    world_size: int
    #: the user's override; None: learned (watch.threshold)
    timeout: float | None
    action: str
    directory: str
    #: the job's rendezvous: a rank of another job (or a stray client) is told it is wrong
    token: str = ""
    #: metrics socket (-1: off), job id, seconds between link rounds (0: none), version
    metrics_fd: int = -1
    job_id: str = ""
    probe_every: float = 300.0
    version: str = ""
    #: with metrics on, the longest it stays after a verdict for a scrape to render it
    metrics_linger: float = METRICS_LINGER_S

    def to_json(self) -> str:
        return json.dumps(self.__dict__)


@dataclass
class Peer:
    sock: socket.socket
    lines: Lines
    rank: int | None = None
    #: when this rank was last acked, and the thresholds it was told then
    acked_at: float = float("-inf")
    told: tuple[float, str, float, str] | None = None
    #: what waits to be written to it, whole messages only (``watch.transport``)
    outbox: Outbox = field(default_factory=Outbox)


@dataclass
class Probing:
    """One probe round: ranks asked and not answered, what came back; a stall's ends in a
    verdict."""

    ident: int
    trigger: str
    deadline: float
    waiting: set[int]
    found: list[LinkProbe]
    straggler: Diagnosis | None = None
    #: a straggler round's snapshot (what showed the slowdown): its probes are judged on it
    seen: Snapshot | None = None

    def over(self, now: float) -> bool:
        return not self.waiting or now > self.deadline


class HubState:
    """What the hub knows of the job; the transport's sockets are declared here, set by ``Hub``."""

    sock: socket.socket
    selector: selectors.BaseSelector

    def __init__(self, options: HubOptions) -> None:
        self.options = options
        #: every connection, each rank's current one, and those with messages waiting
        self.peers: dict[socket.socket, Peer] = {}
        self.channels: dict[int, Peer] = {}
        self.writing: set[socket.socket] = set()
        self.settings = Settings(timeout=options.timeout, action=options.action,
                                 period=period_for(options.world_size))
        self.watchdog = Watchdog(self.settings)
        self.states: dict[int, RankState] = {}
        self.left: dict[int, str] = {}
        self.finished: set[int] = set()
        self.last_bye = 0.0
        self.started = time.monotonic()
        self.verdict_at: float | None = None
        #: the exit verdict sent, for a rank whose hello comes after it
        self.verdict: dict[str, Any] | None = None
        self.probing: Probing | None = None
        self.rounds = 0
        self.next_straggler = 0.0
        #: this slowdown's first probed wait, the round that named it, rounds naming nothing
        self.probed_wait: float | None = None
        self.straggler_probes: tuple[LinkProbe, ...] = ()
        self.slowdown_rounds = 0
        self.warnings: list[Diagnosis] = []
        self.warned: list[dict[str, Any]] = []
        #: ranks told their peers' side ports
        self.introduced: set[int] = set()
        self.next_desync = 0.0
        #: states received, and how many the last desync comparison saw (none new: skip it)
        self.published = self.desync_seen = 0
        #: ranks whose clean goodbye waits for the hub's word, since when
        self.leaving: dict[int, float] = {}
        self.desync_named = False
        #: the encoded ack and the thresholds it carries (the watchdog's, its learned base)
        self.ack: tuple[tuple[float, str, float, str] | None, bytes] = (None, b"")
        #: (monotonic, wall) time as of which every message was read; None: now
        self.read_as_of: tuple[float, float] | None = None
        #: when this hub received each rank's state (its monotonic clock)
        self.heard: dict[int, float] = {}
        #: how far behind its sockets the hub ran at worst (seconds), for the report
        self.most_behind = 0.0
        #: metrics: the verdicts and the last's time, pairs' streams, next round, the server
        self.verdicts: list[Diagnosis] = []
        self.judged_at: float | None = None
        self.link_probes: dict[tuple[int, int], Probed] = {}
        self.next_links: float | None = None
        self.metrics: Any = None
        #: channel closed but process answers (``watch.channel``); checks; slow readers
        self.broken: dict[int, str] = {}
        self.checks = Checks()
        self.slow_readers: set[int] = set()
        #: ranks that told the hub of a SIGTERM: when each asked, until answered; all that did
        self.terms: dict[int, float] = {}
        self.terminated: set[int] = set()

    def send(self, peer: Peer, message: dict[str, Any] | bytes, key: str = "") -> None:
        """Queue ``message`` whole for ``peer`` (the transport's: ``Hub.send``)."""
        raise NotImplementedError

    # -- what arrives ------------------------------------------------------------------------

    def handle_rank(self, rank: int, kind: Any, message: dict[str, Any]) -> None:
        """Record what ``rank`` said; a state or an announced call with when it came."""
        if kind == "state":
            self.states[rank] = RankState.from_dict(message["state"])
            self.heard[rank] = time.monotonic()
            self.published += 1
        elif kind == "call":
            self.add_call(rank, CollectiveRecord.from_dict(message["record"]))
            self.heard[rank] = time.monotonic()
            self.published += 1
        elif kind == "probes":
            self.add_probes(rank, message)
        elif kind == "term":
            self.terms[rank] = time.monotonic()
            self.terminated.add(rank)
        elif kind == "bye":
            error = str(message.get("error", ""))
            if error and message.get("peer"):
                self.left[rank] = PEER_FAILED + error
            elif error:
                self.left[rank] = f"exited with an error: {error}"
            else:
                self.finished.add(rank)
                self.last_bye = time.monotonic()
                if message.get("wait"):
                    self.leaving[rank] = time.monotonic()

    def add_call(self, rank: int, record: CollectiveRecord) -> None:
        state = self.states.get(rank) or RankState(rank=rank, world_size=self.options.world_size)
        if any(r.seq == record.seq and r.group == record.group for r in state.recent):
            return
        # a rank announces a call only once the one before returned (or was async)
        recent = tuple(replace(r, ended=record.started, state="completed")
                       if r.ended is None and r.seq < record.seq else r for r in state.recent)
        # received now, sent when it began by the rank's clock: the state's time from here on
        self.states[rank] = replace(state, recent=(*recent, record)[-64:],
                                    published=max(state.published, record.started))

    def add_probes(self, rank: int, message: dict[str, Any]) -> None:
        probing = self.probing
        if probing is None or message.get("id") != probing.ident or rank not in probing.waiting:
            return  # late, or from an earlier stall
        probing.waiting.discard(rank)
        found = [LinkProbe.from_dict(p) for p in message.get("probes", ()) if isinstance(p, dict)]
        probing.found += found
        at = time.time()
        for probe in found:
            if probe.what == STREAM:
                self.link_probes[(probe.src_rank, probe.dst_rank)] = Probed(probe, at)

    # -- what the decisions read -------------------------------------------------------------

    def snapshot(self, *, leavers_only: bool = False) -> Snapshot:
        gone = dict(self.left)
        if not leavers_only:
            for rank in self.finished:
                gone.setdefault(rank, f"{FINISHED} while others may still call collectives")
            for rank in self.terminated - set(self.channels):
                gone.setdefault(rank, termination.TERMINATED)
        states: dict[int, RankState | None] = {r: None for r in range(self.options.world_size)}
        states.update(self.states)
        mono, wall = self.as_of()
        ages = {r: mono - at for r, at in self.heard.items()}
        return Snapshot(self.options.world_size, wall, states, gone, ages=ages)

    def as_of(self) -> tuple[float, float]:
        """(monotonic, wall) time of the state the hub has read (``read_as_of``)."""
        return self.read_as_of or (time.monotonic(), time.time())

    def silent(self, snapshot: Snapshot, after: float | None = None) -> tuple[int, ...]:
        """Ranks heard before but not for ``after`` s (the hub's clock) as of ``snapshot``, with no
        goodbye and an open connection: frozen, or cut off."""
        stale = self.watchdog.stale_after if after is None else after
        away = {*self.left, *self.finished, *self.terminated}
        heard = {*snapshot.ages, *(r for r, s in snapshot.states.items() if s is not None)}
        return tuple(r for r in sorted(heard) if r not in away and snapshot.age(r) > stale)

    def unheard(self) -> bool:
        """Whether a rank was never heard and has not left (its watch may still connect)."""
        away = self.finished | set(self.left) | self.terminated
        return any(r not in self.heard and r not in away
                   for r in range(self.options.world_size))

    # -- probe rounds ------------------------------------------------------------------------

    def ask_probes(self, trigger: str, now: float) -> bool:
        """Ask every live rank to probe its peers when all are stuck; False if nothing to probe."""
        snapshot = self.snapshot()
        stuck = network.stuck_collective(snapshot)
        # a silent rank is the lead: connects to it alone say stopped or cut off
        silent = self.silent(snapshot)[:8]
        if not (silent or network.wants_probes(snapshot)):
            return False
        group = stuck.ranks if stuck is not None and not silent else \
            tuple(range(self.options.world_size))
        return self.send_probes(group, silent, now, trigger=trigger)

    def send_probes(self, group: tuple[int, ...], silent: tuple[int, ...], now: float, *,
                    trigger: str, slowdown: Diagnosis | None = None,
                    seen: Snapshot | None = None) -> bool:
        """Send one probe round's requests to every live rank; False when none was asked."""
        self.rounds += 1
        asked = set()
        group, skip = tuple(sorted(set(group))), {*self.left, *self.finished, *silent}
        for peer in list(self.peers.values()):
            rank = peer.rank
            if rank is not None and rank not in skip:
                self.send(peer, probe_request(self.rounds, self.states, rank, group, silent))
                asked.add(rank)
        if not asked:
            return False
        self.probing = Probing(self.rounds, trigger, now + PROBE_WAIT_S, asked, [], slowdown,
                               seen)
        return True

    def probe_links(self, now: float) -> None:
        """With metrics on, a round :data:`FIRST_LINKS_S` after every rank published, then every
        ``probe_every`` s; never while a rank left, a verdict stands or another round runs."""
        every = self.options.probe_every
        if self.metrics is None or every <= 0 or self.left or self.watchdog.fired or \
                len(self.states) < self.options.world_size:
            return
        if self.next_links is None:
            self.next_links = now + min(every, FIRST_LINKS_S)
        if now < self.next_links:
            return
        self.next_links = now + every
        self.send_probes(tuple(range(self.options.world_size)), (), now, trigger=LINKS)
