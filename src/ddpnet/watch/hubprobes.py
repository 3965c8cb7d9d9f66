"""The hub's probe rounds: when the ranks are stuck together, a silent rank is the lead, a
straggler's network slowed down, or (metrics on) the links are due to be measured, it asks
every live rank to probe its peers (:mod:`ddpnet.watch.probe`) and keeps what comes back
(``HubState.add_probes``) for :data:`PROBE_WAIT_S` at most. The requests are pure
(:func:`probe_request`, :func:`side_ports`); sending them is the transport's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ddpnet.watch import network
from ddpnet.watch.hubstore import LINKS, HubState, Probing
from ddpnet.watch.probe import PORTS_KEY, SIDE, peers_to_probe
from ddpnet.watch.state import Diagnosis, RankState, Snapshot

#: each link probe's bound, and how long the hub waits for every rank's probes
PROBE_TIMEOUT_S = 2.0
PROBE_WAIT_S = 3 * PROBE_TIMEOUT_S + 2.0
#: with metrics on, seconds from every rank's first state to the first link round (the next
#: come every ``HubOptions.probe_every``): past the first steps, long before a scrape or two
FIRST_LINKS_S = 5.0


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


class ProbeRounds(HubState):
    """Starting probe rounds (``probing`` holds the one under way)."""

    def ask_probes(self, trigger: str, now: float) -> bool:
        """Ask every live rank to probe its peers when all are stuck in one collective;
        False when there is nothing to probe (then the hub acts at once)."""
        snapshot = self.snapshot()
        stuck = network.stuck_collective(snapshot)
        # a silent rank is the lead: connects to it alone (~0.1 s) say stopped or cut off,
        # where a full round would stream into a process that reads nothing (8 s)
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
        """With metrics on, a probe round :data:`FIRST_LINKS_S` after every rank published
        (a new job's dashboard has its link matrix within seconds), then every
        ``probe_every`` s, never while a rank left, a verdict stands or another round runs
        (``tick``: two at once streamed twice, and the later replaced the first): each host
        pair's bandwidth and RTT."""
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
