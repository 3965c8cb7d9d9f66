"""How we know (pure): the independent signals in a snapshot that agree with a verdict, and what
would contradict it (docs/watch.md, "How we know")."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from ddpnet.watch.desync import KEY as DESYNC_KEY
from ddpnet.watch.desync import issued, keys
from ddpnet.watch.state import Diagnosis, Snapshot

#: ranks listed by name in one signal line
_SHOWN = 8


def _ranks(ranks: Iterable[int]) -> str:
    shown = [str(r) for r in ranks]
    return ", ".join(shown[:_SHOWN]) + (f" and {len(shown) - _SHOWN} more"
                                        if len(shown) > _SHOWN else "")


def heartbeat(snapshot: Snapshot, named: tuple[int, ...]) -> str:
    """The named ranks' last heartbeat against the others'."""
    states = snapshot.states
    ages = {r: snapshot.age(r) for r, s in states.items()
            if s is not None and (s.published or r in snapshot.ages)}
    if not ages:
        return ""
    mine = [f"rank {r} {ages[r]:.0f} s ago" for r in named[:_SHOWN] if r in ages]
    never = [r for r in named if states.get(r) is None]
    others = [a for r, a in ages.items() if r not in named]
    parts = mine + ([f"rank(s) {_ranks(never)} never"] if never else [])
    tail = f"; the others within {max(others):.0f} s" if others else ""
    return f"heartbeat: last state from {', '.join(parts) or 'every rank'}{tail}" \
        if parts else f"heartbeat: every rank published within {max(ages.values()):.0f} s"


def side_channel(snapshot: Snapshot, named: tuple[int, ...]) -> str:
    said = [f"rank {r}: {snapshot.gone[r]}" for r in named[:_SHOWN] if r in snapshot.gone]
    if said:
        return "side channel: " + "; ".join(said)
    return "side channel: the named rank(s)' connections are open" if named else ""


def probes(snapshot: Snapshot, named: tuple[int, ...]) -> str:
    """The link probes to the named ranks: how many answered."""
    if not snapshot.probes:
        return "probes: none run (the ranks were not all stuck in one collective)"
    to = [p for p in snapshot.probes if p.dst_rank in named] or list(snapshot.probes)
    failed = [p for p in to if not p.reachable]
    outcomes = sorted({p.outcome or ("ok" if p.reachable else "failed") for p in failed})
    where = f"to rank(s) {_ranks(sorted({p.dst_rank for p in to}))}"
    if not failed:
        return f"probes: all {len(to)} {where} answered"
    return f"probes: {len(failed)} of {len(to)} {where} failed ({', '.join(outcomes)})"


def flight(snapshot: Snapshot) -> str:
    """Who is inside which collective (the Flight Recorder's unfinished entries)."""
    inside: dict[tuple[str, int], list[int]] = {}
    idle: list[int] = []
    for rank, state in sorted(snapshot.states.items()):
        record = state.in_flight() if state is not None else None
        if record is not None:
            inside.setdefault((record.op, record.seq), []).append(rank)
        elif state is not None:
            idle.append(rank)
    parts = [f"rank(s) {_ranks(rs)} inside {op} seq {seq}" for (op, seq), rs in inside.items()]
    if idle:
        parts.append(f"rank(s) {_ranks(idle)} inside none")
    return "collectives in flight (Flight Recorder): " + "; ".join(parts) if parts else ""


def sequence(snapshot: Snapshot) -> str:
    """The last finished and the last issued collective seq per rank, grouped."""
    by: dict[tuple[int, int], list[int]] = {}
    for rank, state in sorted(snapshot.states.items()):
        if state is not None:
            by.setdefault((state.last_seq, issued(state)), []).append(rank)
    if not by:
        return ""
    parts = [f"rank(s) {_ranks(rs)} finished {done}, issued {made}"
             for (done, made), rs in sorted(by.items())]
    agree = "agree" if len(by) == 1 else "differ"
    return f"sequence numbers ({agree}): " + "; ".join(parts)


def steps(snapshot: Snapshot) -> str:
    """Whether the ranks' per-step collective digests (``watch.desync``) agree."""
    tables = {r: keys(s) for r, s in snapshot.states.items()}
    tables = {r: t for r, t in tables.items() if t}
    if len(tables) < 2:
        marked = any(s is not None and DESYNC_KEY in s.extra for s in snapshot.states.values())
        return "step digests: fewer than 2 ranks mark steps (ddpnet.step)" if marked else ""
    common = set.intersection(*(set(t) for t in tables.values()))
    apart = sorted(s for s in common if len({t[s] for t in tables.values()}) > 1)
    if not apart:
        return f"step digests: {len(tables)} ranks agree on {len(common)} common step(s)"
    return (f"step digests: {len(tables)} ranks differ from step {apart[0]} on, in "
            f"{len(apart)} of {len(common)} common steps")


def contradicts(diagnosis: Diagnosis) -> tuple[str, ...]:
    """What would prove the verdict wrong: what to check before acting on it."""
    who = f"rank(s) {_ranks(diagnosis.ranks)}" if diagnosis.ranks else "the ranks"
    table: Mapping[str, tuple[str, ...]] = {
        "rank-gone": (f"a heartbeat or a collective from {who} after the verdict",
                      f"{who}'s process still running and answering on its side port"),
        "collective-mismatch": (
            f"{who}'s collectives matching the others' at the same sequence number and "
            f"step (op, dtype, shape, call site, count)",
            "a collective on another process group counted in the default group's numbers"),
        "rank-not-arriving": (f"{who} entering the collective the others wait in, or its "
                              f"step or phase changing",),
        "network": (f"a probe from any peer reaching {who}'s ports",
                    f"a heartbeat from {who} over its side channel"),
        "straggler": (f"{who}'s compute per step falling back to the others' in later steps",),
        "stalled": ("any rank's step, phase or last finished collective changing",),
    }
    return table.get(diagnosis.kind, ())


def explain(diagnosis: Diagnosis, snapshot: Snapshot) -> Diagnosis:
    """The diagnosis with the signals that bear on it and what would contradict it."""
    if diagnosis.kind == "ok":
        return diagnosis
    named = diagnosis.ranks
    lines = (heartbeat(snapshot, named), side_channel(snapshot, named), probes(snapshot, named),
             flight(snapshot), sequence(snapshot), steps(snapshot))
    return replace(diagnosis, signals=tuple(line for line in lines if line),
                   contradicts=contradicts(diagnosis))
