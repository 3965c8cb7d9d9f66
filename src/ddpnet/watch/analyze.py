"""Name the cause of a stall from every rank's last state (pure: Snapshot -> Diagnosis). Detectors
run in :data:`ddpnet.watch.state.KINDS` order, the first match wins; ``rank-gone`` steps aside for a
mismatch or a link down (docs/watch.md, "What it names")."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ddpnet.watch import activity, desync, network, signals, straggler
from ddpnet.watch.desync import Call, call_of
from ddpnet.watch.desync import describe as describe  # the watchdog's
from ddpnet.watch.network import names
from ddpnet.watch.state import (
    KINDS,
    CollectiveRecord,
    Diagnosis,
    RankState,
    Snapshot,
    victim,
)

#: a live rank whose last heartbeat is older than this (seconds) is not answering
STALE_AFTER_S = 10.0
#: at most this many ranks are named in one line (1000-rank jobs)
_NAMED = 8


@dataclass(frozen=True)
class Options:
    """``stale_after``: seconds without a heartbeat before a rank stopped answering; ``live``: False
    for dump files (old states are not stale)."""

    stale_after: float = STALE_AFTER_S
    live: bool = True


def analyze(snapshot: Snapshot, options: Options = Options()) -> Diagnosis:
    """The first detector that names a cause, else ``stalled``/``ok``, with the agreeing signals."""
    silent = options.stale_after if options.live else network.FRESH_S
    detectors: dict[str, Callable[[], Diagnosis | None]] = {
        "rank-gone": lambda: rank_gone(snapshot, options),
        "collective-mismatch": lambda: mismatch_or_desync(snapshot, options.live),
        "rank-not-arriving": lambda: rank_not_arriving(snapshot, options),
        "network": lambda: network.detect(snapshot, silent),
        "straggler": lambda: straggler.detect(snapshot)}
    found = next((d for d in (detectors[kind]() for kind in KINDS) if d is not None), None)
    return signals.explain(found or _nothing_named(snapshot), snapshot)


def _host(state: RankState | None) -> str:
    return state.host if state is not None and state.host else "?"


def _where(rank: int, state: RankState | None) -> str:
    return f"rank {rank} ({_host(state)})"


# -- rank-gone ---------------------------------------------------------------------------------

def silent_ranks(snapshot: Snapshot, options: Options) -> dict[int, str]:
    """Ranks that are gone, with why, in the order they left; ranks stopped by a peer's failure
    last: they are what the others did to them."""
    out: dict[int, str] = {r: w for r, w in snapshot.gone.items() if not victim(w)}
    victims = {r: w for r, w in snapshot.gone.items() if victim(w)}
    for rank in range(snapshot.world_size):
        state = snapshot.states.get(rank)
        if rank in out or rank in victims:
            continue
        if state is None:
            out[rank] = "never published its state" if options.live else "left no dump"
        elif options.live and snapshot.age(rank) > options.stale_after:
            out[rank] = (f"no heartbeat for {snapshot.age(rank):.0f} s while its "
                         f"side-channel connection stays open" + _why_silent(snapshot, rank))
    return {**out, **victims}


def _why_silent(snapshot: Snapshot, rank: int) -> str:
    """From peers' connect probes: no answer at all is its link or host down; any, a stopped
    process."""
    probes = [p for p in snapshot.probes if p.dst_rank == rank and p.what == "connect"]
    if not probes or any(p.reachable for p in probes):
        return " (process stopped or host frozen)"
    if all(p.outcome in ("timeout", "unreachable") for p in probes):
        who = ", ".join(str(r) for r in sorted({p.src_rank for p in probes}))
        return (f"; its host answers on no port from rank(s) {who} (every connect "
                f"{probes[0].outcome}): its link or host is down")
    return " (process stopped or host frozen)"


def rank_gone(snapshot: Snapshot, options: Options = Options()) -> Diagnosis | None:
    """The ranks that left, first to leave first; steps aside for a mismatch or a link down."""
    gone = silent_ranks(snapshot, options)
    if not gone or _first_mismatch(snapshot) is not None or desync.detect(snapshot) is not None:
        return None
    if options.live and network.cut_off(snapshot, next(iter(gone)), options.stale_after):
        return None
    ranks = list(gone)  # the first to leave first: the others often fail because of it
    hosts = tuple(dict.fromkeys(_host(snapshot.states.get(r)) for r in ranks))
    evidence = [f"{_where(r, snapshot.states.get(r))}: {gone[r]}" + _last_seen(
        snapshot.states.get(r)) for r in ranks[:_NAMED]]
    evidence += _waiting_lines(snapshot, exclude=set(ranks))
    first = ranks[0]
    after = f" (then {len(ranks) - 1} more rank(s): {names(ranks[1:])})" if ranks[1:] else ""
    summary = f"{_where(first, snapshot.states.get(first))} is gone: {gone[first]}{after}"
    return Diagnosis("rank-gone", summary, tuple(ranks), hosts, tuple(evidence),
                     "the job cannot go on without it: read that rank's own log on its host "
                     "(an OOM kill shows in `dmesg`), then restart from the last checkpoint")


def _last_seen(state: RankState | None) -> str:
    if state is None:
        return ""
    phase = f", phase {state.phase!r}" if state.phase else ""
    return f"; last seen at step {state.step}{phase}, last collective seq {state.last_seq}"


def _waiting_lines(snapshot: Snapshot, exclude: set[int]) -> list[str]:
    lines = []
    for rank, state in sorted(snapshot.states.items()):
        flight = state.in_flight() if state is not None and rank not in exclude else None
        if flight is not None:
            lines.append(f"{_where(rank, state)} waits in {describe(flight)} for "
                         f"{snapshot.since(rank, flight.started):.0f} s")
    return lines[:_NAMED]


# -- collective-mismatch -----------------------------------------------------------------------

def _by_seq(snapshot: Snapshot) -> dict[tuple[str, int], dict[int, CollectiveRecord]]:
    table: dict[tuple[str, int], dict[int, CollectiveRecord]] = {}
    for rank, state in snapshot.states.items():
        for record in state.recent if state is not None else ():
            table.setdefault((record.group, record.seq), {})[rank] = record
    return table


def _differs(records: Mapping[int, CollectiveRecord]) -> bool:
    if len({call_of(r)[:3] for r in records.values()}) > 1:
        return True
    sites = {r.site for r in records.values() if r.site}
    return len(sites) > 1


def _first_mismatch(snapshot: Snapshot
                    ) -> tuple[str, int, dict[int, CollectiveRecord]] | None:
    table = _by_seq(snapshot)
    for (group, seq) in sorted(table, key=lambda key: key[1]):
        records = table[(group, seq)]
        if len(records) > 1 and _differs(records):
            return group, seq, records
    return None


def _still_coming(snapshot: Snapshot, group: str, seq: int,
                  records: Mapping[int, CollectiveRecord]) -> bool:
    """A rank of ``group`` not yet at ``seq`` and not gone: its call will come."""
    for rank, state in snapshot.states.items():
        if rank in records or state is None or rank in snapshot.gone:
            continue
        mine = [r.seq for r in state.recent if r.group == group]
        if mine and max(mine) < seq:
            return True
    return False


def _expected(snapshot: Snapshot, group: str, seq: int) -> Call | None:
    """What the job's own pattern says ``seq`` should be: the call one period p back, where the last
    2p calls repeat; None without such a period."""
    calls: dict[int, Call] = {}
    for state in snapshot.states.values():
        for r in state.recent if state is not None else ():
            if r.group == group and r.seq < seq:
                calls.setdefault(r.seq, call_of(r))
    run: list[Call] = []
    for s in range(seq - 1, 0, -1):  # the unbroken history just before seq, oldest first
        if s not in calls:
            break
        run.insert(0, calls[s])
    for period in range(1, len(run) // 2 + 1):  # the shortest that the last 2p calls repeat
        if all(run[-i] == run[-i - period] for i in range(1, period + 1)):
            return run[-period]
    return None


def collective_mismatch(snapshot: Snapshot, group: str, seq: int,
                        records: Mapping[int, CollectiveRecord],
                        live: bool = False) -> Diagnosis | None:
    """Ranks at one seq calling different collectives; live, an even split waits (None) for ranks
    still coming, else the side that broke the pattern (:func:`_expected`) is named."""
    groups: dict[Call, list[int]] = {}
    for rank, record in sorted(records.items()):
        groups.setdefault(call_of(record), []).append(rank)
    sides = sorted(groups.values(), key=len)
    tied = len(sides) > 1 and len(sides[-1]) == len(sides[-2])
    if live and tied and _still_coming(snapshot, group, seq, records):
        return None
    if tied:  # the side that broke the job's own pattern is the one apart
        expected = _expected(snapshot, group, seq)
        keyed = {tuple(ranks): key for key, ranks in groups.items()}
        apart = [ranks for ranks in sides if keyed[tuple(ranks)] != expected]
        if expected is not None and len(apart) == 1:
            sides = [apart[0], *[r for r in sides if r is not apart[0]]]
    evidence = [f"rank(s) {names(ranks)} called {describe(records[ranks[0]])}"
                for ranks in groups.values()]
    ranks = tuple(sorted(records))
    hosts = tuple(sorted({_host(snapshot.states.get(r)) for r in ranks}))
    other = sides[1] if len(sides) > 1 else sides[0]
    odd = (network.name(snapshot.states, sides[0][0]) if len(sides[0]) == 1
           else f"rank(s) {names(sides[0])}")  # one rank apart: with its host
    summary = (f"collective mismatch at seq {seq}: {odd} called "
               f"{describe(records[sides[0][0]])}, rank(s) {names(other)} "
               f"{describe(records[other[0]])}")
    return Diagnosis("collective-mismatch", summary, ranks, hosts, tuple(evidence),
                     "every rank must call the same collectives in the same order with the same "
                     "shapes: look for a data-dependent branch or an uneven number of batches "
                     "per rank (DistributedSampler drop_last, torch's Join)")


def mismatch_or_desync(snapshot: Snapshot, live: bool = False) -> Diagnosis | None:
    """A mismatch at one seq, else a desync without a hang (:mod:`ddpnet.watch.desync`)."""
    found = _first_mismatch(snapshot)
    if found is not None:
        return collective_mismatch(snapshot, *found, live=live)
    return desync.detect(snapshot)


# -- rank-not-arriving -------------------------------------------------------------------------

def rank_not_arriving(snapshot: Snapshot, options: Options = Options()) -> Diagnosis | None:
    """Ranks behind the collective the others wait in; steps aside when the first is cut off."""
    found = behind(snapshot)
    if found is None:
        return None
    target, flights, late = found
    if options.live and network.cut_off(snapshot, late[0], options.stale_after):
        return None
    states = snapshot.states
    evidence = [line for r in late[:_NAMED]
                for line in (_late_line(snapshot, r), _idle_line(snapshot, r)) if line]
    evidence += _waiting_lines(snapshot, exclude=set(late))
    first = states[late[0]]
    assert first is not None
    ranks = tuple(late)
    hosts = tuple(sorted({_host(states[r]) for r in late}))
    summary = (f"{_late_line(snapshot, late[0])}; {len(flights)} rank(s) wait "
               f"for it in {describe(target)}")
    return Diagnosis("rank-not-arriving", summary, ranks, hosts, tuple(evidence),
                     _late_hint(first.phase))


def behind(snapshot: Snapshot) -> tuple[CollectiveRecord, tuple[int, ...],
                                        tuple[int, ...]] | None:
    """The latest collective some ranks wait in, those ranks, and the ranks behind it; None when
    nobody waits or nobody is behind."""
    waiting = {r: s.in_flight() for r, s in snapshot.states.items() if s is not None}
    flights = {r: f for r, f in waiting.items() if f is not None}
    if not flights:
        return None
    target = max(flights.values(), key=lambda f: f.seq)
    late = tuple(sorted(r for r, s in snapshot.states.items()
                        if s is not None and r not in flights and s.last_seq < target.seq))
    return (target, tuple(sorted(flights)), late) if late else None


def _idle_line(snapshot: Snapshot, rank: int) -> str:
    """What a late rank's main thread is in and how long it stood still; "" without activity."""
    state = snapshot.states.get(rank)
    found, idle = activity.of(state), activity.idle_for(snapshot, rank)
    if found is None or idle is None:
        return ""
    if idle < activity.STILL_S:
        return f"{_where(rank, state)} is working: {activity.doing(found)}"
    return (f"{_where(rank, state)} has not worked for {idle:.0f} s (no CPU, no I/O, the "
            f"same stack): {activity.doing(found)}")


def _late_line(snapshot: Snapshot, rank: int) -> str:
    state = snapshot.states.get(rank)
    if state is None:
        return f"rank {rank} (?) has not arrived"
    phase = state.phase or "unmarked code"
    since = f" for {snapshot.since(rank, state.phase_since):.0f} s" if state.phase_since \
        else ""
    return (f"{_where(rank, state)} has not arrived: in {phase!r}{since} at step {state.step}, "
            f"last collective seq {state.last_seq}")


def _late_hint(phase: str) -> str:
    if phase == "data":
        return ("its data loader is stuck or slow: slow or unreachable storage, a worker "
                "process that died, a lock; if that much time is expected (its workers "
                "starting), mark it: with ddpnet.phase('warmup'): ...")
    return ("it is busy outside the collectives (compute, I/O, a rank-0-only step such as "
            "saving a checkpoint): if that is expected, mark it with ddpnet.phase('checkpoint' | "
            "'eval' | 'warmup') as a with block (its own allowance), or set "
            "ddpnet.init(watch_timeout=...); mark phases with ddpnet.phase(...) to see where")


# -- nothing named -----------------------------------------------------------------------------

def _nothing_named(snapshot: Snapshot) -> Diagnosis:
    lines = _waiting_lines(snapshot, exclude=set())
    if not lines:
        return Diagnosis("ok", "no rank is inside a collective: nothing is stalled")
    ranks = tuple(sorted(r for r, s in snapshot.states.items()
                         if s is not None and s.in_flight() is not None))
    return Diagnosis("stalled", f"{len(ranks)} rank(s) wait inside collectives and no detector "
                     f"named why", ranks, (), tuple(lines),
                     "every rank is inside the same collective: suspect the network between "
                     "them (`ddpnet check` on all nodes)")
