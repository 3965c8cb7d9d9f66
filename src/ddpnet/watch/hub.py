"""The side channel's hub (edge): a small process rank 0 starts, not a thread of rank 0, so it
outlives rank 0 being killed or aborted by gloo and can still name that. Every rank's heartbeat
connects to it; it keeps each rank's last state, notices who leaves without a goodbye, runs the
watchdog, prints the report on rank 0's stderr, writes it under the watch directory and sends
the verdict that makes every rank exit. ``ddpnet diagnose`` asks it for a snapshot.

While the job is healthy it runs the straggler analysis every :data:`STRAGGLER_EVERY_S`
seconds and warns once per distinct straggler (one line, no exit), and once per stall that a
working rank holds back (``watchdog.Watchdog.hold``: it is busy, not stuck); when collectives slowed
down on most ranks (``straggler.wants_probes``) it first runs one probe round, so that the
warning names the slow node or link. When the watchdog fires
and every rank is inside the same collective (``network.wants_probes``), it first asks every
live rank to probe its peers and waits at most :data:`PROBE_WAIT_S` for the answers: the
verdict is analysed with the probes of this stall that arrived.

With metrics on (``DDPNET_METRICS_PORT``) it also serves the job's metrics
(:mod:`ddpnet.watch.metrics`, rendered when scraped) on the socket rank 0 bound for it, runs a
link probe round :data:`FIRST_LINKS_S` after every rank published and then every
``HubOptions.probe_every`` seconds so that each host pair's bandwidth is there to graph, and
before it leaves after a verdict (exit, or warn then every rank gone) it waits for one scrape
to have rendered it, so that an alert can fire: only while something scrapes (none ever did:
it leaves at once; none came for twice the scraper's own interval: it stopped) and at most
``HubOptions.metrics_linger`` seconds (``DDPNET_METRICS_LINGER_S``).

It listens on one address (MASTER_ADDR's own, never every interface), reads lines of at most
``wire.MAX_LINE`` bytes, never blocks on a peer (non-blocking sockets, one selector), and exits
when every rank has left, a few seconds after an exit verdict, or when no rank came at all.
"""

from __future__ import annotations

import json
import selectors
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ddpnet.exitcodes import ExitCode
from ddpnet.watch import cutoff, desync, network, straggler, termination
from ddpnet.watch.analyze import Options, analyze
from ddpnet.watch.channel import Checks, side_port
from ddpnet.watch.dump import write_report, write_warnings
from ddpnet.watch.metrics import JobView, Probed
from ddpnet.watch.probe import PORTS_KEY, SIDE, STREAM, peers_to_probe
from ddpnet.watch.report import render_html, render_text, report_dict, warning_line
from ddpnet.watch.state import (
    FINISHED,
    LINK_DOWN,
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
from ddpnet.watch.wire import Lines, encode

#: seconds the hub waits for the first rank before it gives up
FIRST_RANK_S = 120.0
#: seconds after an exit verdict before the hub leaves, connected or not
AFTER_VERDICT_S = 5.0
#: seconds after an exit verdict the hub stays for a rank it never heard: one whose
#: heartbeat still connected when a peer died waits that long for its handshake and the
#: verdict (session.VERDICT_WAIT_S), then 2 s
UNHEARD_AFTER_VERDICT_S = 12.0
#: seconds the hub stays after every rank it heard from said goodbye while others never
#: connected (their watch was off): the job ended without them, nothing is left to watch
AFTER_LAST_BYE_S = 10.0
#: seconds between straggler analyses of a healthy job
STRAGGLER_EVERY_S = 5.0
#: each link probe's bound, and how long the hub waits for every rank's probes
PROBE_TIMEOUT_S = 2.0
PROBE_WAIT_S = 3 * PROBE_TIMEOUT_S + 2.0
#: probe rounds for one network slowdown while none names its node or link
SLOWDOWN_ROUNDS = 3
#: the watchdog's pace: a tick is O(N) (a snapshot of every rank), so at most one every
#: TICK_S however many messages arrive (one per heartbeat was N² work a second at 4,096),
#: and above TICK_RANKS ranks one every TICK_S x N / TICK_RANKS: the ticks' work a second
#: stays that of TICK_RANKS ranks (at 4,096, 10 ticks a second took 0.23 of a core and the
#: heartbeats queued behind them); a verdict comes at most that much later (0.4 s)
TICK_S, TICK_RANKS = 0.1, 1024
#: connections accepted at once when several wait (4,096 ranks say hello together)
ACCEPT_BATCH = 256
#: a rank's states are acknowledged at most this often (and at most every half threshold),
#: and at once when the threshold changed: an ack tells a rank the hub still hears it, for a
#: silence of threshold + ``cutoff.MARGIN_S`` (>= 7 s learned); one per heartbeat was 4,096
#: sends a second at 4,096 ranks, ~40% of the hub's time. With 1 s heartbeats every second
#: state is acked; with 2 s ones (4,096 ranks) each
ACK_EVERY_S = 1.5
#: seconds between comparisons of the ranks' collective digests (watch.desync)
DESYNC_EVERY_S = 1.0
#: how long a rank's clean goodbye is held before the hub lets it go while others still run
#: (time for a later collective of theirs to show: an extra one at the end is a verdict)
FAREWELL_HOLD_S = 2.5
#: with metrics on, the longest the hub stays after a verdict for a scrape to see it (the
#: default of ``HubOptions.metrics_linger``: 4 of Prometheus's default 15 s intervals)
METRICS_LINGER_S = 60.0
#: a probe round's trigger when it only measures the links for the metrics
LINKS = "links"
#: with metrics on, seconds from every rank's first state to the first link round (the next
#: come every ``HubOptions.probe_every``): past the first steps, long before a scrape or two
FIRST_LINKS_S = 5.0
#: why a rank is gone when its side channel closed without a goodbye and its process does
#: not answer (``watch.channel``)
#: seconds a connection's outbox may hold a message with none finished before its reader is
#: dropped as too slow (and marked: ``slow_readers`` in the report), never fed half of one
WRITE_DEADLINE_S = 10.0
CLOSED = "its process exited or was killed (side channel closed without a goodbye)"


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
    #: the metrics socket rank 0 bound and passed down (-1: metrics off), the job's id
    #: there, seconds between link probe rounds for them (0: none), ddpnet's version
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
    #: when this rank was last acknowledged, and the thresholds it was told then (the
    #: watchdog's and its learned base: a cut-off rank judges itself by the base)
    acked_at: float = float("-inf")
    told: tuple[float, str, float, str] | None = None
    #: what waits to be written to it, whole messages only (``watch.transport``)
    outbox: Outbox = field(default_factory=Outbox)


@dataclass
class Probing:
    """One probe round: the ranks asked and not answered yet, what came back. A stall's round
    ends in the verdict (``trigger``); a straggler's (``straggler``: what was found without
    probes) in a warning naming the slow node or link."""

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


def tick_every(world_size: int) -> float:
    """Seconds between the watchdog's ticks for ``world_size`` ranks (pure)."""
    return TICK_S * max(1.0, world_size / TICK_RANKS)


def probe_request(ident: int, states: dict[int, RankState], rank: int,
                  group: tuple[int, ...], silent: tuple[int, ...] = ()) -> dict[str, Any]:
    """What ``rank`` is asked to probe: only the peers it probes, each with its address and
    published ports (pure; O(1) peers per rank above ``FULL_MESH_LIMIT``; ``group`` sorted,
    as ``send_probes`` passes it). With ``silent`` (ranks that stopped answering) only
    those, by connects: is their host still up?"""
    if silent:
        group = tuple(sorted({rank, *silent}))
    peers = {str(r): {"address": states[r].address, "ports": states[r].extra.get(PORTS_KEY, {})}
             for r in peers_to_probe(rank, group, ordered=True)
             if r in states and states[r].address}
    return {"t": "probe", "id": ident, "group": list(group), "timeout": PROBE_TIMEOUT_S,
            "peers": peers, "stream": not silent}


def side_ports(states: dict[int, RankState], rank: int,
               roster: Sequence[int]) -> dict[str, Any]:
    """The peers ``rank`` checks when it hears the hub no more: each one's address and side
    port (pure; the ring neighbours above ``FULL_MESH_LIMIT`` ranks, as for probes;
    ``roster``: ``states``' ranks, sorted once for every rank)."""
    out = {}
    for peer in peers_to_probe(rank, roster, ordered=True):
        side = states[peer].extra.get(PORTS_KEY, {}).get(SIDE)
        if states[peer].address and side:
            out[str(peer)] = {"address": states[peer].address, "ports": {SIDE: side}}
    return out


class Hub:
    def __init__(self, options: HubOptions, sock: socket.socket) -> None:
        self.options = options
        self.settings = Settings(timeout=options.timeout, action=options.action,
                                 period=period_for(options.world_size))
        self.watchdog = Watchdog(self.settings)
        self.sock = sock
        self.selector = selectors.DefaultSelector()
        self.selector.register(sock, selectors.EVENT_READ)
        self.peers: dict[socket.socket, Peer] = {}
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
        #: the network's wait per step (straggler.recent_wait) when this slowdown was first
        #: probed, the probes of a round that named its node or link (kept for the later
        #: checks), and the rounds that named nothing; reset when the job is even again
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
        #: (monotonic, wall) time as of which every message that had come was read: when
        #: the last select returned, once what it returned is handled (``serve``); the
        #: watchdog judges silence and stalls as of it. None: now (a hub not serving)
        self.read_as_of: tuple[float, float] | None = None
        #: when this hub received each rank's state (its own monotonic clock: a rank's clock
        #: may be off by minutes), beside ``states``: every age and silence is measured from
        #: it (``Snapshot.ages``), the rank's timestamps only relative to its ``published``
        self.heard: dict[int, float] = {}
        #: how far behind its sockets the hub ran at worst (seconds), for the report
        self.most_behind = 0.0
        #: metrics (``serve_metrics``): the verdicts given, each rank pair's last stream
        #: probe, when the next link round is due, the server
        self.verdicts: list[Diagnosis] = []
        #: when the last verdict was given (monotonic; either action), None: none yet
        self.judged_at: float | None = None
        self.link_probes: dict[tuple[int, int], Probed] = {}
        self.next_links: float | None = None
        self.metrics: Any = None
        #: each rank's current connection (a rank that connects anew replaces its old one)
        self.channels: dict[int, Peer] = {}
        #: connections with messages waiting for the socket to take them
        self.writing: set[socket.socket] = set()
        #: ranks whose channel closed without a goodbye while their process answers
        #: (``watch.channel``): unheard, not gone, until they reconnect or the silent-rank
        #: probes judge them; the checks under way; ranks dropped as too slow a reader
        self.broken: dict[int, str] = {}
        self.checks = Checks()
        self.slow_readers: set[int] = set()
        #: ranks that told the hub of a SIGTERM (``watch.termination``): when each asked,
        #: until answered; all that did (away once their connection closes)
        self.terms: dict[int, float] = {}
        self.terminated: set[int] = set()

    # -- the loop ----------------------------------------------------------------------------

    def serve(self) -> None:
        next_tick = 0.0
        pace = tick_every(self.options.world_size)
        while not self.done():
            # a SIGTERM'd rank waits for its answer (``answer_terms``): look again soon
            ready = self.selector.select(timeout=0.05 if self.terms else 0.25)
            # what came before this moment is read below (heartbeats are far below a read's
            # 64 KiB): a hub short of CPU reads them late, and judged by the clock after
            # reading thousands of them it named live ranks silent (session 12: at 4,096
            # ranks on 0.6 of a core, heartbeats read 20 s late)
            as_of = (time.monotonic(), time.time())
            for key, events in ready:
                if key.fileobj is self.sock:
                    self.accept()
                    continue
                peer = self.peers.get(key.fileobj)  # type: ignore[call-overload]
                if peer is not None and events & selectors.EVENT_WRITE:
                    self.write(peer)
                if peer is not None and events & selectors.EVENT_READ and \
                        peer.sock in self.peers:
                    self.read(peer)
            self.read_as_of = as_of
            now = time.monotonic()
            self.housekeep(now)
            self.most_behind = max(self.most_behind, now - as_of[0])
            if now >= next_tick:
                next_tick = now + pace
                self.tick()

    def done(self) -> bool:
        now = time.monotonic()
        return self.job_over(now) and self.verdict_seen(now)

    def job_over(self, now: float) -> bool:
        """Whether the job is over for the hub (a verdict sent, every rank gone, none came)."""
        if self.verdict_at is not None:
            waited = now - self.verdict_at
            if self.unheard() and waited <= UNHEARD_AFTER_VERDICT_S:
                return False  # a rank still connecting is told the verdict (handle: hello)
            if self.writing:
                return False  # the verdict still goes out (a late reader is dropped)
            return not self.peers or waited > AFTER_VERDICT_S
        if self.left and not self.watchdog.fired:
            return False  # a rank left without a goodbye: name it first
        away = len(self.finished | set(self.left) | self.terminated)
        if away >= self.options.world_size and not self.peers:
            return True
        if not self.peers and self.states and set(self.states) <= self.finished:
            return now - self.last_bye > AFTER_LAST_BYE_S
        return not self.states and now - self.started > FIRST_RANK_S

    def unheard(self) -> bool:
        """Whether a rank of the job was never heard and has not left (its watch may still
        connect)."""
        away = self.finished | set(self.left) | self.terminated
        return any(r not in self.heard and r not in away
                   for r in range(self.options.world_size))

    def verdict_seen(self, now: float) -> bool:
        """Whether the last verdict was scraped, or waiting for a scrape is pointless
        (``exposition.seen_by_scrape``: nothing scrapes, the scraper stopped, or
        ``metrics_linger`` passed); always without metrics or verdicts."""
        if self.metrics is None or self.judged_at is None:
            return True
        return bool(self.metrics.seen(self.judged_at, now, self.options.metrics_linger))

    def accept(self) -> None:
        """Every connection waiting (up to ACCEPT_BATCH; one on a blocking socket)."""
        for _ in range(1 if self.sock.getblocking() else ACCEPT_BATCH):
            try:
                conn, _addr = self.sock.accept()
            except OSError:  # none left (EAGAIN)
                return
            conn.setblocking(False)
            self.peers[conn] = Peer(conn, Lines(), outbox=Outbox(deadline=WRITE_DEADLINE_S))
            self.selector.register(conn, selectors.EVENT_READ)

    def read(self, peer: Peer) -> None:
        try:
            data = peer.sock.recv(1 << 16)
            messages = peer.lines.feed(data) if data else []
        except (OSError, ValueError):
            data, messages = b"", []
        for message in messages:
            self.handle(peer, message)
        if not data:
            self.drop(peer)

    def drop(self, peer: Peer) -> None:
        """Close a connection. Its rank, if it left without a goodbye, is gone once its
        process does not answer (``watch.channel``: checked in a thread, unless it published
        no side port or a verdict stands); answering, it is unheard, not gone."""
        self.selector.unregister(peer.sock)
        peer.sock.close()
        self.peers.pop(peer.sock, None)
        self.writing.discard(peer.sock)
        rank = peer.rank
        if rank is None or rank in self.finished or rank in self.left:
            return
        self.channels.pop(rank, None)
        if rank in self.terminated:  # SIGTERM'd with no fault: a user's stop
            return
        where = side_port(self.states.get(rank))
        if where is None or self.verdict_at is not None:
            self.left[rank] = CLOSED
        else:
            self.checks.start(rank, where)

    def housekeep(self, now: float) -> None:
        """Drop readers too slow for their outbox's deadline (marked), and take the answers
        of the channel checks: a rank that has not connected anew is gone, or unheard."""
        for sock in list(self.writing):
            peer = self.peers.get(sock)
            if peer is not None and peer.outbox.late(now):
                if peer.rank is not None:
                    self.slow_readers.add(peer.rank)
                self.drop(peer)
        for answer in self.checks.done():
            rank = answer.rank
            if rank in self.channels or rank in self.finished or rank in self.left:
                continue
            if answer.alive:
                self.broken[rank] = answer.detail
            else:
                self.left[rank] = CLOSED
        self.answer_terms(now)

    def answer_terms(self, now: float) -> None:
        """Answer the SIGTERM'd ranks (``watch.termination``): no fault, or nothing (the
        verdict comes), once read what came with their word."""
        fault = termination.fault_known(self.left, self.terminated, bool(self.checks.running),
                                        self.verdict is not None)
        for rank, asked in list(self.terms.items()):
            said = termination.answer(asked, now, fault)
            if said is None:
                continue
            del self.terms[rank]
            peer = self.channels.get(rank)
            if said == "no-fault" and peer is not None:
                self.send(peer, {"t": "no-fault"})

    def attach(self, peer: Peer, rank: int) -> None:
        """``peer`` is now ``rank``'s connection: one it had before is closed (it connected
        anew), and a rank whose channel closed without a goodbye is back, unless a verdict
        stands."""
        old = self.channels.get(rank)
        if old is not None and old is not peer:
            old.rank = None
            self.drop(old)
        self.channels[rank] = peer
        peer.rank = rank
        self.broken.pop(rank, None)
        if self.verdict is None and self.left.get(rank) == CLOSED:
            del self.left[rank]

    # -- messages ----------------------------------------------------------------------------

    def handle(self, peer: Peer, message: dict[str, Any]) -> None:
        kind = message.get("t")
        if kind == "snapshot":
            self.send(peer, {"t": "snapshot", "snapshot": self.snapshot().to_dict(),
                             "stale_after": self.watchdog.stale_after,
                             "threshold": self.watchdog.threshold.to_dict()})
            return
        rank = int(message.get("rank", -1))
        if not 0 <= rank < self.options.world_size:
            return
        if kind == "hello":
            self.send(peer, {"t": "welcome", "token": self.options.token})
            if message.get("token") == self.options.token:
                self.attach(peer, rank)
                if self.verdict is not None:  # a rank that connects after it hears it now
                    self.send(peer, self.verdict)
            return
        if peer.rank == rank:  # else not this job's rank: no hello with the right token
            self.handle_rank(rank, kind, message)
            if kind == "state":
                self.acknowledge(peer, rank)

    def handle_rank(self, rank: int, kind: Any, message: dict[str, Any]) -> None:
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

    def acknowledge(self, peer: Peer, rank: int) -> None:
        """Tell a rank its state arrived (every ACK_EVERY_S), with the threshold it judges
        itself by when the hub goes quiet (``watch.cutoff``; at once when it changed), and
        once every rank published, the peers it checks then."""
        dog, now = self.watchdog, time.monotonic()
        # a change of seconds or source is told at once (not each new count in a reason)
        told = (dog.threshold.seconds, dog.threshold.source, dog.base.seconds, dog.base.source)
        if told != peer.told or now - peer.acked_at >= min(ACK_EVERY_S, told[0] / 2):
            if told != self.ack[0]:  # the same bytes for every rank until it changes
                self.ack = (told, encode({"t": "ack", "threshold": dog.threshold.to_dict(),
                                          "base": dog.base.to_dict()}))
            self.send(peer, self.ack[1], key="ack")
            peer.acked_at, peer.told = now, told
        if len(self.states) == self.options.world_size and rank not in self.introduced:
            self.introduced.add(rank)  # every rank has published: the roster is all of them
            self.send(peer, {"t": "peers", "peers": side_ports(
                self.states, rank, range(self.options.world_size))})

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

    def send(self, peer: Peer, message: dict[str, Any] | bytes, key: str = "") -> None:
        """Queue ``message`` whole (``bytes``: one already encoded; ``key``: it replaces a
        queued one of that key not begun) and write what the socket takes now, never
        blocking; the rest goes at the selector's next writable event (:meth:`write`)."""
        peer.outbox.put(message if isinstance(message, bytes) else encode(message), key)
        self.write(peer)

    def write(self, peer: Peer) -> None:
        """Write what ``peer``'s socket takes; watch it for writing while anything waits."""
        try:
            peer.outbox.flush(peer.sock)
        except OSError:
            self.drop(peer)
            return
        waiting = peer.outbox.pending()
        if waiting != (peer.sock in self.writing):
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if waiting else 0)
            self.selector.modify(peer.sock, events)
            (self.writing.add if waiting else self.writing.discard)(peer.sock)

    # -- the watchdog ------------------------------------------------------------------------

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
        ages = {r: mono - at for r, at in self.heard.items() if r in self.states}
        return Snapshot(self.options.world_size, wall, states, gone, ages=ages)

    def as_of(self) -> tuple[float, float]:
        """(monotonic, wall) time of the state the hub has read (``read_as_of``)."""
        return self.read_as_of or (time.monotonic(), time.time())

    def tick(self) -> None:
        if self.verdict_at is not None or not self.states or self.checks.running:
            return  # a closed channel being checked (watch.channel) may be the cause
        now = self.as_of()[0]
        if self.probing is not None and self.probing.trigger == LINKS and \
                self.probing.over(now):
            self.probing = None
        probing = self.probing
        if probing is not None and probing.straggler is None and probing.trigger != LINKS:
            # a stall's round: the verdict waits for it
            if probing.over(now):
                self.probing = None
                self.act(probing.trigger, tuple(probing.found))
            return
        trigger = self.watchdog.due(self.snapshot(leavers_only=True), now,
                                    silent=self.quiet(now)) or self.desync_due(now)
        working, self.watchdog.warning = self.watchdog.warning, None
        self.warn(working)  # working ranks hold a stall's verdict: said once per stall
        if trigger is not None:
            self.probing = None  # a stall outranks a straggler's probes
            if not self.ask_probes(trigger, now):
                self.act(trigger)
            return
        self.release(now)
        if probing is None:
            self.check_stragglers(now)
            self.probe_links(now)
        elif probing.trigger != LINKS and probing.over(now):
            self.probing = None
            self.warn_probed(probing)

    def release(self, now: float) -> None:
        """Answer the goodbyes held (FAREWELL_HOLD_S at most, at once when every rank has
        finished or left)."""
        everyone = len(self.finished | set(self.left)) >= self.options.world_size
        for rank, since in list(self.leaving.items()):
            if everyone or now - since > FAREWELL_HOLD_S:
                del self.leaving[rank]
                for peer in list(self.peers.values()):
                    if peer.rank == rank:
                        self.send(peer, {"t": "farewell"})

    def desync_due(self, now: float) -> str | None:
        """Every DESYNC_EVERY_S: whether the ranks' collectives parted (no hang needed), or a
        rank finished while another issued more (``watch.desync``)."""
        if now < self.next_desync or self.watchdog.fired or self.desync_named or \
                self.published == self.desync_seen:
            return None
        self.next_desync, self.desync_seen = now + DESYNC_EVERY_S, self.published
        if desync.detect(self.snapshot()) is None:
            return None
        self.desync_named = True  # once: with watch_action="warn" the job goes on parted
        return "collectives parted"

    # -- straggler warnings ------------------------------------------------------------------

    def check_stragglers(self, now: float) -> None:
        """Every STRAGGLER_EVERY_S while healthy (every second until enough steps came): one
        warning line per distinct straggler. A network that slowed down is first probed
        (:meth:`probe_slowdown`), so that the warning names the slow node or link."""
        if now < self.next_straggler or self.left:
            return
        snapshot = replace(self.snapshot(leavers_only=True), probes=self.straggler_probes)
        if straggler.steps_published(snapshot) < 2 * straggler.MIN_STEPS:
            self.next_straggler = now + 1.0
            return
        self.next_straggler = now + STRAGGLER_EVERY_S
        found = straggler.detect(snapshot)
        if found is None:
            self.probed_wait, self.straggler_probes, self.slowdown_rounds = None, (), 0
            return
        if self.probe_slowdown(snapshot, now, found):
            return
        self.warn(found)

    def probe_slowdown(self, snapshot: Snapshot, now: float, found: Diagnosis) -> bool:
        """Start a straggler probe round for a network slowdown: once per slowdown (again
        at the next checks while rounds name nothing, :data:`SLOWDOWN_ROUNDS` in all), and
        anew when the waits doubled since (a mild slowdown, then a NIC dropping its rate).
        False when there is none to start."""
        wait = straggler.recent_wait(snapshot)
        worse = self.probed_wait is None or wait >= 2 * self.probed_wait
        retry = not self.straggler_probes and self.slowdown_rounds < SLOWDOWN_ROUNDS
        if not (worse or retry) or not straggler.wants_probes(replace(snapshot, probes=())):
            return False
        if worse:
            self.probed_wait, self.slowdown_rounds = wait, 0
        self.straggler_probes = ()
        return self.send_probes(tuple(range(self.options.world_size)), (), now,
                                trigger="straggler", slowdown=found, seen=snapshot)

    def warn_probed(self, probing: Probing) -> None:
        """A straggler's probe round is over: the warning, named by the probes when they
        found the slow node or link (kept for the later checks of this slowdown). They are
        judged with the steps that showed the slowdown: the window moves on in the round's
        seconds, and a slowdown read again at its end can fall short of the bar by noise."""
        probes = tuple(probing.found)
        seen = probing.seen or self.snapshot(leavers_only=True)
        found = straggler.detect(replace(seen, probes=probes))
        if found is not None and found.hosts:
            self.straggler_probes = probes
            self.warn(found, probes)
        else:
            self.slowdown_rounds += 1
            self.warn(probing.straggler, probes)

    def warn(self, found: Diagnosis | None, probes: tuple[LinkProbe, ...] = ()) -> None:
        """One line on stderr and an entry in warnings.json (with the round's probes) per
        distinct straggler, and per stall that working ranks hold (``watchdog.hold``)."""
        if found is None or (found.kind != "working" and
                             any(w.ranks == found.ranks for w in self.warnings)):
            return
        self.warnings.append(found)
        self.warned.append({"at": time.time(), **found.to_dict(),
                            **({"probes": [p.to_dict() for p in probes]} if probes else {})})
        sys.stderr.write(warning_line(found) + "\n")
        sys.stderr.flush()
        write_warnings(Path(self.options.directory), self.warned)

    # -- link probes -------------------------------------------------------------------------

    def ask_probes(self, trigger: str, now: float) -> bool:
        """Ask every live rank to probe its peers when all are stuck in one collective;
        False when there is nothing to probe (then the hub acts at once)."""
        snapshot = self.snapshot()
        stuck = network.stuck_collective(snapshot)
        # a silent rank is the lead: connects to it alone (~0.1 s) say stopped or cut off,
        # where a full round would stream into a process that reads nothing (8 s)
        silent = self.silent(snapshot)
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

    def quiet(self, now: float) -> tuple[int, ...]:
        """Ranks heard from before but not for ``stale_after`` s by this hub's clock (whose
        goodbye did not come): frozen, or cut off."""
        stale = self.watchdog.stale_after
        return tuple(r for r, at in sorted(self.heard.items())
                     if now - at > stale and r not in self.left and r not in self.finished
                     and r not in self.terminated)

    def silent(self, snapshot: Snapshot) -> tuple[int, ...]:
        """Ranks whose connection stays open but whose heartbeats stopped (at most 8), by the
        snapshot's ages (this hub's clock)."""
        stale = self.watchdog.stale_after
        return tuple(r for r in sorted(self.states)
                     if r not in self.left and r not in self.finished
                     and snapshot.age(r) > stale)[:8]

    def probe_links(self, now: float) -> None:
        """With metrics on, a probe round :data:`FIRST_LINKS_S` after every rank published
        (a new job's dashboard has its link matrix within seconds), then every
        ``probe_every`` s, never while a rank left or a verdict stands: each host pair's
        bandwidth and RTT."""
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

    # -- the verdict -------------------------------------------------------------------------

    def act(self, trigger: str, probes: tuple[LinkProbe, ...] = ()) -> None:
        snapshot = replace(self.snapshot(), probes=probes)
        diagnosis = analyze(snapshot, Options(stale_after=self.watchdog.stale_after))
        if self.watchdog.note:  # working ranks held it: until when
            diagnosis = replace(diagnosis, evidence=(*diagnosis.evidence, self.watchdog.note))
        if diagnosis.kind == "network" and diagnosis.sub_kind == LINK_DOWN:
            # every other rank cut off may be this node's own link: read it (once a verdict)
            iface, link = cutoff.link_state(address=self.options.bind)
            diagnosis = cutoff.hub_node_down(diagnosis, snapshot, iface, link, self.options.bind)
        report = {**report_dict(diagnosis, snapshot, trigger, self.warnings),
                  "threshold": self.watchdog.threshold.to_dict(),
                  "hub_most_behind_s": round(self.most_behind, 3),
                  "slow_readers": sorted(self.slow_readers),
                  "channels_broken": {str(r): why for r, why in sorted(self.broken.items())}}
        directory = Path(self.options.directory)
        written = write_report(directory, report, render_html(diagnosis, snapshot, trigger))
        where = f"\n  report: {written}" if written else ""
        sys.stderr.write(render_text(diagnosis, snapshot, trigger) + where + "\n")
        sys.stderr.flush()
        self.watchdog.fired = True
        self.verdicts.append(diagnosis)
        self.judged_at = time.monotonic()  # a scrape that begins after this renders it
        if self.settings.action != "exit":
            return
        # with the states it needs to say which node is at fault (each launcher's recovery)
        verdict = {"t": "verdict", "diagnosis": diagnosis.to_dict(),
                   "code": int(ExitCode.WATCHDOG), "report": str(written or ""),
                   "context": snapshot.around(diagnosis).to_dict()}
        for peer in list(self.peers.values()):
            if peer.rank is not None:
                self.send(peer, verdict)
        self.verdict, self.verdict_at = verdict, time.monotonic()


    # -- metrics -----------------------------------------------------------------------------

    def serve_metrics(self, sock: socket.socket) -> None:
        """Serve the job's metrics on ``sock`` (bound by rank 0) from a thread of its own."""
        from prometheus_client import CollectorRegistry

        from ddpnet.net.exposition import Server
        from ddpnet.watch.metrics import JobCollector

        registry = CollectorRegistry(auto_describe=False)
        registry.register(JobCollector(self.metrics_view))
        # a verdict (or the job moving again) shows in the very next scrape, never a render
        # from before it (net.exposition serves a costly render again for a while)
        self.metrics = Server(sock, registry,
                              lambda: (len(self.verdicts), self.watchdog.fired))

    def metrics_view(self) -> JobView:
        """What a scrape renders (the server's thread: copies, each one atomic under the
        GIL, of what the hub's thread changes)."""
        now = time.monotonic()
        states = dict(self.states)
        verdicts = list(self.verdicts)
        threshold = self.watchdog.threshold
        snapshot = Snapshot(self.options.world_size, time.time(), dict(states))
        return JobView(
            job_id=self.options.job_id, world_size=self.options.world_size,
            started=time.time() - (now - self.started), states=states,
            heard_ago={r: now - at for r, at in dict(self.heard).items()},
            threshold_s=threshold.seconds, threshold_source=threshold.source,
            warnings=tuple(w.kind for w in list(self.warnings)),
            verdicts=tuple(v.kind for v in verdicts),
            standing=verdicts[-1] if verdicts and self.watchdog.fired else None,
            probes=dict(self.link_probes), straggler_scores=straggler.scores(snapshot),
            version=self.options.version)


def ask_snapshot(address: str, port: int, timeout: float = 5.0) -> tuple[Snapshot, float]:
    """A running hub's snapshot and its ``stale_after`` (``ddpnet diagnose``); OSError when no
    hub answers, ValueError when what answers is not one."""
    from ddpnet.watch.wire import MAX_SNAPSHOT

    deadline = time.monotonic() + timeout
    lines = Lines(MAX_SNAPSHOT)
    with socket.create_connection((address, port), timeout=timeout) as sock:
        sock.sendall(encode({"t": "snapshot"}))
        while time.monotonic() < deadline:
            data = sock.recv(1 << 20)
            if not data:
                break
            for message in lines.feed(data):
                if message.get("t") == "snapshot":
                    return (Snapshot.from_dict(message["snapshot"]),
                            float(message.get("stale_after", 10.0)))
    raise ValueError(f"{address}:{port} did not answer with a watch snapshot")


def main(argv: list[str]) -> int:
    """``python -m ddpnet.watch.hub OPTIONS_JSON``: bind, say ``ready PORT`` on stdout, serve."""
    from ddpnet.net.ports import listen_socket

    options = HubOptions(**json.loads(argv[0]))
    try:
        sock = listen_socket(options.bind, options.port, backlog=4096)
    except OSError as exc:
        print(f"error {options.bind}:{options.port}: {exc.strerror or exc}", flush=True)
        return 1
    sock.setblocking(False)
    hub = Hub(options, sock)
    if options.metrics_fd >= 0:
        hub.serve_metrics(socket.socket(fileno=options.metrics_fd))
    print(f"ready {sock.getsockname()[1]}", flush=True)
    sys.stdout.close()
    try:
        hub.serve()
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
