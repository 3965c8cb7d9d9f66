"""This rank's heartbeat (edge): a daemon thread that publishes the rank's state to the hub
every ``period`` seconds over its own TCP connection (not the process group it watches), and
obeys the hub's verdict: write this rank's dump, say why on stderr, exit with the watchdog's
code. The training thread may be stuck inside a C++ collective, so exiting is ``os._exit``.

Each state carries what the rank's process does (``extra["activity"]``: CPU, I/O bytes, its
main thread's stack: ``watch.activity``, so that a rank that works is told from a stuck one),
the last steps' wall and collective seconds (a ``StragglerWindow`` fed
from the recorder's finished steps, its ring and the spans a comm hook timed) and
``extra["ports"]``: the listeners its peers probe when the hub asks (a ``probe`` message:
``probe_pairs`` runs in a daemon thread, bounded, and its LinkProbes go back as ``probes``).

Each state also carries ``extra["gaps"]``: the summary of this rank's own gaps between
progress (``watch.gaps``), folded from its Flight Recorder ring and its marks every beat,
what the hub learns the threshold from.

The hub acknowledges every state (``ack``, with its current threshold and the learned base
under it) and, once every rank published, names the peers this rank checks when the hub goes
quiet (``peers``). The thread outlives a lost connection: a rank that heard nothing from the
hub for its threshold (``threshold.self_judged``: the learned base, not another rank's phase)
while it made no progress either judges itself (``watch.cutoff``: its interface, route, the
hub and its peers) and exits 4 by itself, since the verdict cannot reach it.

Every socket operation has a timeout.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from ddpnet.exitcodes import ExitCode
from ddpnet.output import exit_now
from ddpnet.watch import activity, cutoff, gaps
from ddpnet.watch.desync import KEY as DESYNC_KEY
from ddpnet.watch.dump import write_state
from ddpnet.watch.probe import (
    BACKEND,
    PORTS_KEY,
    SIDE,
    SINK,
    STREAM_BYTES,
    ProbeSink,
    listening_ports,
    probe_pairs,
)
from ddpnet.watch.progress import progressed
from ddpnet.watch.recorder import RING, Recorder
from ddpnet.watch.state import CollectiveRecord, Diagnosis, RankState
from ddpnet.watch.straggler import StragglerWindow, waits_per_step
from ddpnet.watch.threshold import (
    TEACH_NOTHING,
    Threshold,
    learn,
    learned,
    period_for,
    self_judged,
    teaches_nothing,
)
from ddpnet.watch.transport import Outbox, ready
from ddpnet.watch.wire import MAX_LINE, Lines, encode

#: bound on each send and on connecting
SOCKET_TIMEOUT_S = 2.0
#: the longest a rank's clean goodbye waits for the hub's word (hub.FAREWELL_HOLD_S + 1)
FAREWELL_WAIT_S = 3.5
#: seconds the hub's kernel may leave what this rank sent unacknowledged before the
#: connection fails (TCP_USER_TIMEOUT: a cut link errors instead of hanging; the rank judges
#: itself by the hub's application acks, sooner)
LOST_AFTER_S = 60.0
#: seconds this rank's outbox may hold a message without finishing one (a full send buffer:
#: a congested or flapping link, a hub not reading) before it drops the connection and
#: connects anew; the message cut there is the old connection's, never the new one's
SEND_DEADLINE_S = 4.0
#: after a lost connection, seconds during which the heartbeat connects anew (one try per
#: period, each bounded by SOCKET_TIMEOUT_S), from its own thread
RECONNECT_FOR_S = 30.0


class Beacon:
    """One rank's side of the side channel."""

    def __init__(self, recorder: Recorder, ident: RankState, directory: Path, *,
                 period: float | None = None, lost_after: float = LOST_AFTER_S,
                 override: float | None = None,
                 exit_now: Callable[[int], None] = exit_now,
                 stream: TextIO | None = None) -> None:
        self.recorder, self.ident, self.directory = recorder, ident, directory
        #: the process this rank is: a forked child (a DataLoader worker, a raw ``os.fork()``)
        #: inherits this object and its socket, and never speaks for its parent
        self.owner = os.getpid()
        #: where the verdict's line goes: stderr as the watch started (torch's excepthook
        #: swaps sys.stderr for a StringIO while ours waits for the verdict, and the exit
        #: that follows would leave the line in it, unprinted)
        self.stream = stream if stream is not None else sys.stderr
        #: seconds between heartbeats: the job size's (``threshold.period_for``) unless given
        self.period = period_for(ident.world_size) if period is None else period
        self.lost_after = lost_after
        #: the hub's last threshold (raised by any rank's long phase), and its learned base
        self.threshold: Threshold = learn(learned({}), override=override)
        self.base: Threshold | None = None
        #: what this rank judges itself by when the hub goes quiet (``threshold.self_judged``)
        self.judge_by: Threshold = self.threshold
        #: this rank's own gaps between progress (``watch.gaps``), and the spans (wall time)
        #: a long phase was on, its own or one the hub reported: gaps over them teach nothing
        #: (:meth:`note_long`)
        self.gaps = gaps.GapLog()
        self.long_seen: tuple[tuple[float, float], ...] = ()
        self.long_open = False
        #: an ack since the last beat said that gaps now teach nothing (its word can be
        #: replaced by the next ack before the beat reads it)
        self.told_nothing = False
        self.hub: tuple[str, int] = ("", 0)
        #: the peers (address and side port) to check then, as the hub sent them
        self.peers: dict[int, RankState] = {}
        #: monotonic and wall time of the hub's last message, of this rank's last progress
        self.heard, self.heard_at = time.monotonic(), time.time()
        #: this rank's state when it last moved (``watch.progress``), and when (monotonic)
        self.moved: RankState | None = None
        self.progressed = time.monotonic()
        self.judged = False
        #: this connection's outbox (``watch.transport``): a state or call is queued whole
        #: and written without blocking; the job's token, and when the connection was lost
        #: (the heartbeat connects anew until RECONNECT_FOR_S after), how often it was
        self.outbox = Outbox(limit=4 * MAX_LINE, deadline=SEND_DEADLINE_S)
        self.token = ""
        self.lost_at: float | None = None
        self.reconnects = 0
        #: a hub that accepts connections but is slow to answer is checked again then
        self.recheck_at = 0.0
        self.exit_now = exit_now
        self.sock: socket.socket | None = None
        self.send_lock = threading.Lock()
        self.stopped = threading.Event()
        self.lines = Lines()
        self.thread: threading.Thread | None = None
        self.window = StragglerWindow()
        self.window_lock = threading.Lock()
        #: seconds every step taken from the recorder spent inside collectives (cumulative)
        self.wait_seconds = 0.0
        #: whether this rank works when it keeps the others waiting (``watch.activity``)
        self.activity = activity.shared()
        self.listeners: list[ProbeSink] = []
        #: set once a verdict was obeyed (its exit may be a test's stand-in that returns)
        self.obeyed = threading.Event()
        #: set when the hub answered this rank's SIGTERM: no peer failed, a user's stop
        self.no_fault = threading.Event()
        #: set when the hub answered this rank's goodbye (or cannot any more)
        self.farewell = threading.Event()
        #: set when this rank died of a peer's failure and waits for the verdict
        self.dying = threading.Event()
        #: held by the handshake (:meth:`connect`, in its own thread) and by :meth:`close`:
        #: a rank that ends while it connects says goodbye once, on the new connection
        self.life = threading.Lock()
        #: the error this rank ended with (:meth:`close`)
        self.error = ""
        #: set once the handshake ended (connected, refused or given up) or the rank closed:
        #: a goodbye sent before it would be lost (:meth:`await_verdict` waits for it)
        self.settled = threading.Event()
        #: what the hub sent with its welcome (a verdict given before this rank connected)
        self.pending: list[dict[str, Any]] = []
        #: set once the hub acknowledged a state of this rank: from then on a verdict can
        #: name it with its host and step (before, "never published its state")
        self.known = threading.Event()

    def state(self) -> RankState:
        records = self.recorder.records()
        rec = self.recorder
        done = [r.seq for r in records if r.ended is not None]
        with self.window_lock:
            steps = rec.take_spans()
            if steps:
                timed = rec.take_waits(steps[0][0], steps[-1][1])
                spans = [(r.started, r.ended) for r in records if r.ended is not None]
                # a full ring holds only the last RING collectives: without a comm hook's
                # timed spans, a step that began before its oldest would read as no wait (a
                # fast unmarked loop's first steps each beat: a false "slow network, 7e6x")
                covered = records[0].started if len(records) >= RING and not timed \
                    else -math.inf
                for (start, end), wait in zip(steps, waits_per_step(steps, spans + timed),
                                              strict=True):
                    if start >= covered:
                        self.window = self.window.add(end - start, wait)
                        self.wait_seconds += min(wait, end - start)
            window, waited = self.window, self.wait_seconds
            counts, seconds = rec.step_totals()
            summary = self.learn_gaps(records, max(done, default=0))
        extra = {**self.ident.extra, DESYNC_KEY: rec.digest(), gaps.KEY: summary.to_dict(),
                 activity.KEY: self.activity.sample(activity.FRESH_S).to_dict()}
        with rec.lock:
            return replace(self.ident, step=rec.step, phase=rec.phase, extra=extra,
                           phase_since=rec.phase_since, last_seq=max(done, default=0),
                           recent=records, step_times=window.step_times,
                           wait_times=window.wait_times, published=time.time(),
                           long_phase=rec.long_phase, long_since=rec.long_since,
                           step_counts=counts, step_seconds=seconds, wait_seconds=waited)

    def learn_gaps(self, records: tuple[CollectiveRecord, ...], finished: int) -> gaps.Summary:
        """Fold this rank's progress events since the last heartbeat into its gap log (under
        the window lock); the summary it publishes."""
        rec, now = self.recorder, time.time()
        marks, complete = rec.take_marks()
        self.note_long(rec.long_phase, rec.long_since, now)
        self.gaps = gaps.observe(self.gaps, records, marks, marks_complete=complete, ring=RING,
                                 now=now, finished=finished, skip=self.long_seen)
        return self.gaps.summary()

    def note_long(self, own: str, since: float, now: float) -> None:
        """Note what teaches nothing: this rank's own long phase, from its start to the beat
        that sees it over (the phase's end mark falls in between); and a point now while
        ``threshold.teaches_nothing`` (another rank's phase, working or unheard ranks, or the
        hub unheard: its word lags, but a gap that waited on it spans the point, a step's
        gap seldom does)."""
        spans = list(self.long_seen)
        if own and spans and spans[-1][0] == since:
            spans[-1] = (since, now)
        elif own:
            spans.append((since, now))
        elif self.long_open and spans:  # it ended since the last beat
            spans[-1] = (spans[-1][0], now)
        self.long_open = bool(own)
        unheard_for = time.monotonic() - self.heard if self.known.is_set() else 0.0
        if self.told_nothing or teaches_nothing(self.threshold, unheard_for, self.period):
            spans.append((now, now))  # told since the last beat, or now
        self.told_nothing = False
        self.long_seen = tuple(spans[-8:])

    def open_ports(self, *, gloo: bool, exclude: tuple[int, ...] = ()) -> dict[str, int]:
        """Listen for peers' probes on this rank's address and publish the ports: ``side``
        (answers while this rank's host is up), ``sink`` (stream probes) and, for gloo only,
        ``backend`` (gloo's own listener; NCCL's must not be poked)."""
        note = self.activity.note_watch  # a peer's probe is no work of this rank's
        side = ProbeSink(self.ident.address, max_conns=8, idle=2.0, note=note)
        sink = ProbeSink(self.ident.address, note=note)
        self.listeners = [side, sink]
        ports = {SIDE: side.port, SINK: sink.port}
        if gloo:
            found = listening_ports(exclude=(*ports.values(), *exclude))
            if found:
                ports[BACKEND] = found[0]
        self.ident = replace(self.ident, extra={**self.ident.extra, PORTS_KEY: ports})
        return ports

    def connect(self, address: str, port: int, *, token: str, patience: float = 10.0) -> None:
        """Connect to the hub, retrying while it starts, and check it is this job's (``token``);
        OSError after ``patience`` or when something else answers there."""
        try:
            self._connect(address, port, token, patience)
        finally:
            self.settled.set()

    def _connect(self, address: str, port: int, token: str, patience: float) -> None:
        self.hub, self.token = (address, port), token
        with self.life:  # close() waits for the handshake; one after it is told here
            sock = self.open(patience)
            if self.stopped.is_set():  # the rank ended while this connected: its goodbye
                self.send({"t": "state", "rank": self.ident.rank,
                           "state": self.state().to_dict()})
                self.send({"t": "bye", "rank": self.ident.rank, "error": self.error,
                           **({"peer": True} if self.error and self.dying.is_set() else {})})
                self.outbox.drain(sock, SOCKET_TIMEOUT_S)
                self.sock = None
                sock.close()
                return
            # what came with the welcome (a verdict given before this rank connected), in
            # order before whatever the heartbeat thread reads next
            for message in self.pending:
                self.handle(message)
            self.pending.clear()
            self.thread = threading.Thread(target=self.run, name="ddpnet-watch-heartbeat",
                                           daemon=True)
            self.thread.start()

    def open(self, patience: float) -> socket.socket:
        """Connect to :attr:`hub`, retrying while it starts, say hello and check the welcome
        (OSError after ``patience``, or when something else answers); then the connection
        is this rank's, non-blocking, with a new outbox (under :attr:`life`)."""
        address, port = self.hub
        deadline = time.monotonic() + patience
        while True:
            try:
                sock = socket.create_connection((address, port), timeout=SOCKET_TIMEOUT_S)
                if hasattr(socket, "TCP_USER_TIMEOUT"):  # Linux: a cut link errors, not hangs
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT,
                                    int(self.lost_after * 1000))
                sock.sendall(encode({"t": "hello", "rank": self.ident.rank,
                                     "token": self.token}))
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.lines = Lines()
        # a hub welcoming thousands of ranks at once may take longer than a socket timeout
        welcome = self.expect("welcome", max(SOCKET_TIMEOUT_S, deadline - time.monotonic()),
                              sock)
        if welcome.get("token") != self.token:
            sock.close()
            raise OSError(f"what listens at {address}:{port} is not this job's hub "
                          f"({welcome.get('token') or 'no answer'})")
        sock.setblocking(False)
        with self.send_lock:
            self.outbox = Outbox(limit=4 * MAX_LINE, deadline=SEND_DEADLINE_S)
            self.sock = sock
        self.heard, self.heard_at = time.monotonic(), time.time()
        self.lost_at = None
        return sock

    def send(self, message: dict[str, Any]) -> bool:
        """Queue ``message`` whole on this connection's outbox and write what the socket
        takes now, never blocking (the training thread announces its calls here); the
        heartbeat thread writes the rest. A newer state replaces one not begun; a message
        that does not fit is dropped (False). A connection that broke, or that finished no
        message for SEND_DEADLINE_S, is dropped (:meth:`lose`) and the heartbeat connects
        anew."""
        sock = self.sock
        if sock is None or os.getpid() != self.owner:
            return False
        kind = str(message.get("t", ""))
        with self.send_lock:
            queued = self.outbox.put(encode(message), key="state" if kind == "state" else "")
        self.flush(sock)
        return queued

    def flush(self, sock: socket.socket) -> None:
        """Write what ``sock`` takes of the outbox now; lose a broken or late connection."""
        try:
            with self.send_lock:
                if self.sock is sock:
                    self.outbox.flush(sock)
                    late = self.outbox.late(time.monotonic())
                else:
                    late = False
        except OSError:
            late = True
        if late:
            self.lose(sock)

    def lose(self, sock: socket.socket) -> None:
        """Drop a connection that broke or stopped taking messages, after reading what the
        hub sent on it (a verdict waiting for a stopped rank); the heartbeat connects anew
        (:meth:`reconnect`)."""
        if self.sock is not sock:
            return
        with contextlib.suppress(OSError, ValueError):
            while ready(sock, write=False, seconds=0)[0]:
                data = sock.recv(1 << 16)
                if not data:
                    break
                for message in self.lines.feed(data):
                    self.heard, self.heard_at = time.monotonic(), time.time()
                    self.handle(message)
        if self.sock is sock:
            self.sock = None
            self.lost_at = time.monotonic()
        self.farewell.set()  # nobody answers a goodbye on this connection any more
        sock.close()

    def reconnect(self) -> None:
        """After a lost connection: one bounded try to connect anew (from the heartbeat
        thread), until RECONNECT_FOR_S after the loss; what came with the welcome (a verdict
        given meanwhile) is handled at once."""
        lost = self.lost_at
        if lost is None or not self.token or self.obeyed.is_set() or \
                time.monotonic() - lost > RECONNECT_FOR_S:
            return
        with self.life:
            if self.stopped.is_set():
                return
            try:
                self.open(0.0)
            except OSError:
                self.lost_at = lost
                return
            self.reconnects += 1
            self.farewell.clear()  # a goodbye on the new connection is answered again
            for message in self.pending:
                self.handle(message)
            self.pending.clear()

    def judge_self(self, state: RankState) -> None:
        """When this rank heard nothing from the hub for its threshold and made no progress
        either, nobody can tell it the verdict: check its own link, route, the hub and its
        peers (``watch.cutoff``), then write its dump, print the verdict and exit 4."""
        own = learned({self.ident.rank: gaps.Summary.from_dict(state.extra.get(gaps.KEY))})
        self.judge_by = self_judged(self.threshold, self.base, own, state)
        now = time.monotonic()
        if progressed(self.moved, state):
            self.moved, self.progressed = state, now
        if self.judged or self.stopped.is_set() or self.obeyed.is_set() or \
                now < self.recheck_at:
            return
        early = not self.judge_due(now)
        if early and (self.dying.is_set() or not cutoff.early(
                now, self.heard, self.progressed, self.judge_by.seconds)):
            return
        facts = self.gather(state, now)
        sock = self.sock
        if sock is not None:
            self.listen(0.0, sock)  # a verdict that came meanwhile wins
        if self.obeyed.is_set():
            return
        if early and not cutoff.conclusive(facts):  # the threshold decides
            self.recheck_at = time.monotonic() + cutoff.EARLY_S / 2
            return
        if not early and not self.judge_due(time.monotonic()):
            return
        if cutoff.patient(facts, self.judge_by.seconds):
            self.recheck_at = time.monotonic() + self.judge_by.seconds
            return
        self.leave(facts)

    def leave(self, facts: cutoff.Facts) -> None:
        """This rank's own verdict: its dump, the verdict on stderr, exit 4."""
        self.judged = True
        diagnosis = cutoff.verdict(facts)
        path = write_state(self.directory, self.state(), f"{diagnosis.kind}: "
                           f"{diagnosis.summary}", verdict=diagnosis)
        lines = "".join(f"  - {line}\n" for line in diagnosis.evidence)
        self.exit_saying(int(ExitCode.WATCHDOG), diagnosis, path,
                         f"{lines}  hint: {diagnosis.hint}\n")

    def exit_saying(self, code: int, diagnosis: Diagnosis, dump: Path | None,
                    details: str = "") -> None:
        """The verdict's line (then ``details``) on :attr:`stream`, flushed, and the exit:
        ``os._exit``, as the training thread may sit inside a C++ collective."""
        where = f"; dump {dump}" if dump else ""
        with contextlib.suppress(OSError, ValueError):  # a closed or broken pipe
            self.stream.write(f"ddpnet: watch: rank {self.ident.rank} exits ({code}): "
                              f"{diagnosis.kind}: {diagnosis.summary}{where}\n{details}")
            self.stream.flush()
        self.obeyed.set()
        self.exit_now(code)

    def gather(self, state: RankState, now: float) -> cutoff.Facts:
        """What this rank finds about itself (``cutoff.gather``: bounded connects)."""
        judged = self.judge_by
        return cutoff.gather(state, self.hub, self.peers, heard_ago=now - self.heard,
                             heard_at=self.heard_at, stalled_for=now - self.progressed,
                             judged_by=f"{judged.seconds:g} s ({judged.source}: "
                                       f"{judged.reason})")

    def judge_due(self, now: float) -> bool:
        """Whether to judge itself now: the hub silent and no progress for the threshold
        (``cutoff.due``). A rank that died of a peer's failure (:meth:`await_verdict`) makes
        no progress any more: the hub's silence alone decides, and at once when its
        connection to the hub is gone (no verdict can come). The peer that closed on it is
        often one whose own cut-off left first; the error it raised is no progress."""
        if self.dying.is_set():
            return self.sock is None or cutoff.due(now, self.heard, -math.inf,
                                                   self.judge_by.seconds)
        return cutoff.due(now, self.heard, self.progressed, self.judge_by.seconds)

    def expect(self, kind: str, within: float, sock: socket.socket) -> dict[str, Any]:
        """The first message of ``kind`` on ``sock`` (blocking, with a timeout) within
        ``within`` seconds ({} if none)."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            try:
                data = sock.recv(1 << 16)
                messages = self.lines.feed(data)
            except TimeoutError:  # one socket timeout: wait on until ``within``
                continue
            except (OSError, ValueError):
                return {}
            if not data:
                return {}
            for i, message in enumerate(messages):
                if message.get("t") == kind:
                    self.pending.extend(messages[i + 1:])  # read in the same recv
                    return message
                self.pending.append(message)
        return {}

    def announce(self, record: CollectiveRecord) -> None:
        """A Python collective is about to run: tell the hub now (gloo may abort us inside)."""
        self.send({"t": "call", "rank": self.ident.rank, "record": record.to_dict()})

    def run(self) -> None:
        """Until this rank says goodbye: publish, read the hub's answers (a send that failed
        still reads what the hub sent before, a verdict first), judge itself when the hub
        went quiet."""
        try:
            while not self.stopped.is_set():
                state = self.state()
                sock = self.sock
                if sock is None:
                    self.reconnect()
                    sock = self.sock
                if sock is not None:
                    self.send({"t": "state", "rank": self.ident.rank,
                               "state": state.to_dict()})
                    self.listen_until(time.monotonic() + self.period, sock)
                else:
                    self.stopped.wait(self.period)
                self.judge_self(state)
        finally:
            self.farewell.set()  # nobody answers a goodbye any more

    def listen_until(self, deadline: float, sock: socket.socket) -> None:
        """Read the hub's messages until ``deadline``: one state per period, however many
        answers come (the hub acks each state: returning on the ack made a state/ack storm
        of thousands of messages a second that backlogged the hub by tens of seconds)."""
        while not self.stopped.is_set() and self.sock is sock:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self.listen(left, sock)

    def listen(self, seconds: float, sock: socket.socket) -> None:
        """Read what the hub sent within ``seconds``, and write the outbox as the socket
        takes it; a closed or broken connection is lost (:meth:`lose`)."""
        data: bytes | None = None
        try:
            readable, out = ready(sock, write=self.outbox.pending(), seconds=seconds)
            if out:
                self.flush(sock)
            data = sock.recv(1 << 16) if readable and self.sock is sock else None
            messages = self.lines.feed(data or b"")
        except BlockingIOError:
            data, messages = None, []
        except (OSError, ValueError):
            data, messages = b"", []
        for message in messages:
            self.heard, self.heard_at = time.monotonic(), time.time()
            self.handle(message)
        if data == b"":  # the hub is gone or unreachable (ETIMEDOUT): judge_self decides
            self.lose(sock)

    def handle(self, message: dict[str, Any]) -> None:
        kind = message.get("t")
        if kind == "verdict":
            self.obey(message)
        elif kind == "farewell":
            self.farewell.set()
        elif kind == "no-fault":
            self.no_fault.set()
        elif kind == "ack" and isinstance(message.get("threshold"), dict):
            self.known.set()
            self.threshold = Threshold.from_dict(message["threshold"])
            self.told_nothing |= self.threshold.source in TEACH_NOTHING
            base = message.get("base")
            self.base = Threshold.from_dict(base) if isinstance(base, dict) else None
        elif kind == "peers":
            self.peers = {int(r): RankState(rank=int(r), world_size=self.ident.world_size,
                                            address=str(p.get("address", "")),
                                            extra={PORTS_KEY: p.get("ports", {})})
                          for r, p in dict(message.get("peers", {})).items()}
        elif kind == "probe":
            threading.Thread(target=self.probe, args=(message,), name="ddpnet-watch-probe",
                             daemon=True).start()

    def probe(self, request: dict[str, Any]) -> None:
        """Probe the peers the hub named and send back what was found (each probe bounded
        by the request's timeout)."""
        me = self.ident.rank
        try:
            peers = {int(r): RankState(rank=int(r), world_size=self.ident.world_size,
                                       address=str(p.get("address", "")),
                                       extra={PORTS_KEY: p.get("ports", {})})
                     for r, p in dict(request.get("peers", {})).items()}
            found = probe_pairs(peers, me, timeout=float(request.get("timeout", 2.0)),
                                group=[int(r) for r in request.get("group", [*peers, me])],
                                stream_bytes=STREAM_BYTES if request.get("stream", True) else 0,
                                note=self.activity.note_watch)
        except (OSError, ValueError, TypeError, RuntimeError):
            found = ()
        self.activity.note_watch()  # the probes' CPU is the watch's, not this rank's work
        self.send({"t": "probes", "rank": me, "id": request.get("id"),
                   "probes": [p.to_dict() for p in found]})

    def obey(self, verdict: dict[str, Any]) -> None:
        self.farewell.set()
        diagnosis = Diagnosis.from_dict(verdict.get("diagnosis", {}))
        code = int(verdict.get("code", 1))
        context = verdict.get("context")
        heard = {"diagnosis": diagnosis.to_dict(), "snapshot": context} \
            if isinstance(context, dict) else None
        path = write_state(self.directory, self.state(), f"watchdog: {diagnosis.summary}",
                           heard=heard)
        self.exit_saying(code, diagnosis, path)

    def verdict_within(self, wait: float) -> None:
        """This rank got SIGTERM: a launcher's after a peer died, or a user's stop. Tell the
        hub (``term``) and give it up to ``wait`` s to send the verdict, which exits the
        process from the heartbeat thread (``obey``); return at once when the hub answers
        that no peer failed (``no-fault``: the caller ends the rank as SIGTERM would), or
        when no hub can be told (none can name anything). A rank still connecting (a stop
        in the job's first seconds) finishes its handshake first: else the hub, never told,
        took its closing channel for a death and named it ("rank 1 is gone", exit 4)."""
        self.no_fault.clear()
        deadline = time.monotonic() + wait
        self.settled.wait(wait)
        if not self.send({"t": "term", "rank": self.ident.rank}):
            return
        while time.monotonic() < deadline and not self.stopped.is_set():
            if self.obeyed.wait(0.05) or self.no_fault.is_set():
                return

    def await_verdict(self, error: str, wait: float) -> None:
        """This rank dies of ``error``, a peer's failure seen from here (gloo's "Connection
        closed by peer"): say so, and give the heartbeat thread up to ``wait`` s to receive the
        hub's verdict, which names the cause and exits with the watchdog's code (``obey``);
        then close. Without a verdict the caller goes on to its own exit."""
        if not self.stopped.is_set():
            self.dying.set()
            deadline = time.monotonic() + wait
            # a heartbeat still connecting (the first seconds; a hub starting on a loaded
            # host): this bye sent before the handshake would be lost, and the hub would
            # take the plain goodbye that follows for this rank's own error
            self.settled.wait(wait)
            # the verdict may already wait in the socket even when this bye cannot be sent
            self.send({"t": "bye", "rank": self.ident.rank, "error": error, "peer": True})
            # without a connection to the hub (its node is down: the send failed, or the
            # link's timeout closed it) the heartbeat thread judges this rank itself
            while time.monotonic() < deadline and self.thread is not None and \
                    self.thread.is_alive() and not self.obeyed.is_set():
                time.sleep(0.05)
        self.close(error)

    def forget_in_child(self) -> None:
        """In a forked child (a DataLoader worker): close its copies of this rank's listeners
        and connection, so that neither outlives the rank (a dead rank's side port answering
        from its worker read as alive; its channel stayed open until the workers left); the
        parent's stay as they are (a close, never a shutdown)."""
        self.stopped.set()
        sock, self.sock = self.sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()
        for listener in self.listeners:
            listener.forget()
        self.listeners = []

    def drain(self) -> None:
        """Write the outbox within SOCKET_TIMEOUT_S (a goodbye: the rank is ending)."""
        sock = self.sock
        if sock is None:
            return
        try:
            with self.send_lock:
                self.outbox.drain(sock, SOCKET_TIMEOUT_S)
        except OSError:
            self.lose(sock)

    def close(self, error: str = "") -> None:
        """Say goodbye (with the error that ends this rank, if any) and stop. A clean goodbye
        waits up to FAREWELL_WAIT_S for the hub's word: at once when every rank finished, or
        the verdict when another rank issued a collective this one never will (an extra
        collective at the end: ``watch.desync``), so this rank exits 4 with the others."""
        with self.life:
            self.farewell_to_hub(error)
        self.settled.set()

    def farewell_to_hub(self, error: str) -> None:
        if self.stopped.is_set() or os.getpid() != self.owner:  # a forked child: not ours
            return
        self.error = error
        if error:
            self.stopped.set()
            write_state(self.directory, self.state(), f"exited with an error: {error}")
        self.send({"t": "state", "rank": self.ident.rank, "state": self.state().to_dict()})
        wait = not error and self.thread is not None and self.thread.is_alive()
        # a rank that died of a peer's failure says so again (its first bye may be lost)
        self.send({"t": "bye", "rank": self.ident.rank, "error": error,
                   **({"wait": True} if wait else {}),
                   **({"peer": True} if error and self.dying.is_set() else {})})
        self.drain()
        if wait:
            self.farewell.wait(FAREWELL_WAIT_S)
        self.stopped.set()
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()
        for listener in self.listeners:
            listener.close()
