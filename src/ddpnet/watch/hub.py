"""The side channel's hub (edge): a process rank 0 starts, so that it outlives rank 0's death and
names it. It keeps the states (:mod:`~ddpnet.watch.hubstore`), decides
(:mod:`~ddpnet.watch.hubdecide`), reports and sends the verdict; this module is the transport, the
loop and the metrics server (docs/watch.md, "How it works")."""

from __future__ import annotations

import json
import selectors
import socket
import sys
import time
from typing import Any

from ddpnet.watch import straggler, termination
from ddpnet.watch.channel import side_port
from ddpnet.watch.hubdecide import Decisions
from ddpnet.watch.hubstore import HubOptions, Peer
from ddpnet.watch.metrics import JobView
from ddpnet.watch.probe import side_ports
from ddpnet.watch.state import Snapshot
from ddpnet.watch.transport import Outbox
from ddpnet.watch.wire import MAX_SNAPSHOT, Lines, encode

__all__ = ["Hub", "HubOptions", "ask_snapshot", "main", "tick_every"]


#: seconds the hub waits for the first rank before it gives up
FIRST_RANK_S = 120.0
#: seconds after an exit verdict before the hub leaves, connected or not
AFTER_VERDICT_S = 5.0
#: seconds after an exit verdict the hub stays for a rank it never heard (> VERDICT_WAIT_S)
UNHEARD_AFTER_VERDICT_S = 12.0
#: seconds the hub stays after the last goodbye while other ranks never connected
AFTER_LAST_BYE_S = 10.0
#: a tick is O(N): one every TICK_S, above TICK_RANKS ranks every TICK_S x N / TICK_RANKS
TICK_S, TICK_RANKS = 0.1, 1024
#: connections accepted at once when several wait (4,096 ranks say hello together)
ACCEPT_BATCH = 256
#: a rank's states are acked at most this often, at once when the threshold changed
ACK_EVERY_S = 1.5
#: seconds an outbox may go without finishing a message before its reader is dropped
WRITE_DEADLINE_S = 10.0
#: why a rank is gone when its channel closed without a goodbye (``watch.channel``)
CLOSED = "its process exited or was killed (side channel closed without a goodbye)"


def tick_every(world_size: int) -> float:
    """Seconds between the watchdog's ticks for ``world_size`` ranks (pure)."""
    return TICK_S * max(1.0, world_size / TICK_RANKS)


class Hub(Decisions):
    """The hub: its parts' state and decisions, served over the connections it owns."""

    def __init__(self, options: HubOptions, sock: socket.socket) -> None:
        super().__init__(options)
        self.sock = sock
        self.selector = selectors.DefaultSelector()
        self.selector.register(sock, selectors.EVENT_READ)

    def serve_metrics(self, sock: socket.socket) -> None:
        """Serve the job's metrics on ``sock`` (bound by rank 0) from a thread of its own."""
        from prometheus_client import CollectorRegistry

        from ddpnet.net.exposition import Server
        from ddpnet.watch.metrics import JobCollector

        registry = CollectorRegistry(auto_describe=False)
        registry.register(JobCollector(self.metrics_view))
        # a verdict shows in the very next scrape, never a cached render from before it
        self.metrics = Server(sock, registry,
                              lambda: (len(self.verdicts), self.watchdog.fired))

    def metrics_view(self) -> JobView:
        """What a scrape renders, from the server's thread: copies of what the hub's thread
        changes."""
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

    # -- the loop ----------------------------------------------------------------------------

    def serve(self) -> None:
        next_tick = 0.0
        pace = tick_every(self.options.world_size)
        while not self.done():
            # a SIGTERM'd rank waits for its answer (``answer_terms``): look again soon
            ready = self.selector.select(timeout=0.05 if self.terms else 0.25)
            # judged as of what came before this moment: a hub short of CPU reads late
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

    def verdict_seen(self, now: float) -> bool:
        """Whether the last verdict was scraped, or waiting for a scrape is pointless
        (``exposition.seen_by_scrape``); always without metrics or verdicts."""
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
        """Close a connection; a rank that left without a goodbye is gone once its process does not
        answer (``watch.channel``), else unheard."""
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
        """Drop readers too slow for their outbox; take the channel checks' answers."""
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
        """Answer the SIGTERM'd ranks (``watch.termination``): no fault, or nothing (the verdict
        comes)."""
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
        """``peer`` is now ``rank``'s connection; a rank whose channel closed is back, unless a
        verdict stands."""
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

    def acknowledge(self, peer: Peer, rank: int) -> None:
        """Ack a rank's state (every ACK_EVERY_S, at once when the threshold changed) with the
        threshold it judges itself by; once every rank published, the peers it checks."""
        dog, now = self.watchdog, time.monotonic()
        # a change of seconds or source is told at once (not each new count in a reason)
        threshold = dog.told
        told = (threshold.seconds, threshold.source, dog.base.seconds, dog.base.source)
        if told != peer.told or now - peer.acked_at >= min(ACK_EVERY_S, told[0] / 2):
            if told != self.ack[0]:  # the same bytes for every rank until it changes
                self.ack = (told, encode({"t": "ack", "threshold": threshold.to_dict(),
                                          "base": dog.base.to_dict()}))
            self.send(peer, self.ack[1], key="ack")
            peer.acked_at, peer.told = now, told
        if len(self.states) == self.options.world_size and rank not in self.introduced:
            self.introduced.add(rank)  # every rank has published: the roster is all of them
            self.send(peer, {"t": "peers", "peers": side_ports(
                self.states, rank, range(self.options.world_size))})

    def send(self, peer: Peer, message: dict[str, Any] | bytes, key: str = "") -> None:
        """Queue ``message`` whole (``key`` replaces one not begun) and write what the socket
        takes."""
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


def ask_snapshot(address: str, port: int, timeout: float = 5.0) -> tuple[Snapshot, float]:
    """A running hub's snapshot and ``stale_after`` (``ddpnet diagnose``); OSError, ValueError."""
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
