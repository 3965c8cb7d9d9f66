"""Silent desync: ranks whose collectives pair up wrongly while nothing hangs (pure, except the
per-rank :class:`StepLog`; docs/watch.md, "Silent desync")."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ddpnet.watch.network import name, names
from ddpnet.watch.state import CollectiveRecord, Diagnosis, RankState, Snapshot, finished

#: where a rank's digest travels in ``RankState.extra``
KEY = "desync"
#: steps each rank keeps and publishes
WINDOW = 64
#: Python calls kept per step and distinct signatures per rank (the counts cover the rest)
CALLS_PER_STEP = 16
SIGNATURES = 256

#: one Python collective: op, dtype, shape, call site
Call = tuple[str, str, tuple[int, ...], str]

HINT = ("every rank must make the same collectives in every step: look for a data-dependent "
        "branch around the collective (a `continue` or an `if` on one rank's own batch, loss "
        "or NaN check) or an uneven number of batches per rank (DistributedSampler drop_last, "
        "torch's Join); results since that step are wrong: restart from a checkpoint taken "
        "before it")


class StepLog:
    """The rank's side: per step, its starting seq, collectives issued and Python calls' signatures.
    Not thread-safe: the recorder calls it under its lock."""

    def __init__(self, window: int = WINDOW) -> None:
        self.sigs: dict[Call, int] = {}
        self.steps: deque[tuple[int, int, int, tuple[int, ...]]] = deque(maxlen=window)
        self.step, self.seq = -1, 0
        self.calls: list[int] = []

    def call(self, call: Call) -> None:
        """A Python collective of the default group, in call order."""
        index = self.sigs.get(call)
        if index is None:
            index = len(self.sigs) if len(self.sigs) < SIGNATURES else -1
            if index >= 0:
                self.sigs[call] = index
        if len(self.calls) < CALLS_PER_STEP:
            self.calls.append(index)

    def begin(self, step: int, issued: int) -> None:
        """Step ``step`` begins with ``issued`` collectives so far: the step before it is
        complete."""
        if self.step >= 0:
            self.steps.append((self.step, self.seq, issued - self.seq, tuple(self.calls)))
        self.step, self.seq, self.calls = step, issued, []

    def digest(self, issued: int) -> dict[str, Any]:
        """What the heartbeat publishes (JSON)."""
        return {"sigs": [[op, dtype, list(shape), site] for op, dtype, shape, site in self.sigs],
                "steps": [[s, q, n, list(c)] for s, q, n, c in self.steps],
                "issued": issued}


# -- the comparison (pure) ---------------------------------------------------------------------

@dataclass(frozen=True)
class StepDigest:
    """One rank's finished step: the seq it began after, how many it issued, the calls'
    signatures."""

    step: int
    seq: int
    count: int
    calls: tuple[Call, ...]


@dataclass(frozen=True)
class Parting:
    """The first step whose digests disagree: the odd ranks and the others' digest."""

    step: int
    odd: tuple[int, ...]
    others: tuple[int, ...]
    mine: StepDigest
    theirs: StepDigest


def _call(raw: Any) -> Call:
    op, dtype, shape, site = raw
    return str(op), str(dtype), tuple(int(n) for n in shape), str(site)


#: one step as compared: (seq it began after, count issued, the Python calls' signatures)
Key = tuple[int, int, tuple[Call, ...]]


def keys(state: RankState | None) -> dict[int, Key]:
    """A rank's published steps by number as plain tuples (cheap to compare every second); a number
    seen twice in its window (an epoch restart) is left out."""
    raw = state.extra.get(KEY) if state is not None else None
    if not isinstance(raw, Mapping):
        return {}
    try:
        sigs = [_call(s) for s in raw.get("sigs", ())]
        named: dict[tuple[int, ...], tuple[Call, ...]] = {}  # the same few call lists recur
        out: dict[int, Key] = {}
        twice: set[int] = set()
        for step, seq, count, calls in raw.get("steps", ()):
            index = tuple(calls)
            if index not in named:
                named[index] = tuple(sigs[i] for i in index if 0 <= i < len(sigs))
            if step in out:
                twice.add(step)
            out[step] = (int(seq), int(count), named[index])
    except (TypeError, ValueError, IndexError):
        return {}
    return {int(s): k for s, k in out.items() if s not in twice}


def issued(state: RankState | None) -> int:
    """The last collective seq a rank issued in the default group."""
    if state is None:
        return 0
    raw = state.extra.get(KEY)
    count = int(raw.get("issued", 0)) if isinstance(raw, Mapping) else 0
    seqs = [r.seq for r in state.recent if r.group in ("default_pg", "default", "0")]
    return max([count, *seqs])


def first_parting(snapshot: Snapshot) -> Parting | None:
    """The first step common to every rank's digests where they disagree."""
    tables = {r: keys(s) for r, s in sorted(snapshot.states.items())}
    tables = {r: t for r, t in tables.items() if t}
    if len(tables) < 2:
        return None
    common = set.intersection(*(set(t) for t in tables.values()))
    first = next(iter(tables.values()))
    for step in sorted(common, key=lambda s: first[s][0]):  # one rank's order is every one's
        groups: dict[Key, list[int]] = {}
        for rank, table in tables.items():
            groups.setdefault(table[step], []).append(rank)
        if len(groups) < 2:
            continue
        # the digest most ranks share; ties: more collectives (a skip is usual), lowest rank
        best = max(groups, key=lambda k: (len(groups[k]), k[1], -min(groups[k])))
        odd = sorted(r for key, ranks in groups.items() if key != best for r in ranks)
        return Parting(step, tuple(odd), tuple(groups[best]),
                       StepDigest(step, *tables[odd[0]][step]), StepDigest(step, *best))
    return None


def describe_call(call: Call, seq: int | None = None) -> str:
    """``all_reduce float32[68] seq 42 at train.py:42 in step`` (with ``seq``)."""
    op, dtype, shape, site = call
    dims = "[" + ",".join(str(n) for n in shape) + "]" if shape else ""
    return (f"{op} {dtype}{dims}".strip() + (f" seq {seq}" if seq is not None else "")
            + (f" at {site}" if site else ""))


def call_of(record: CollectiveRecord) -> Call:
    return record.op, record.dtype, record.shape, record.site


def describe(record: CollectiveRecord) -> str:
    """``all_reduce float32[110] seq 42 at train.py:40 in step``."""
    return describe_call(call_of(record), record.seq)


def _first_difference(mine: Sequence[Call], theirs: Sequence[Call]
                      ) -> tuple[Call | None, Call | None]:
    for a, b in zip(mine, theirs, strict=False):
        if a != b:
            return a, b
    n = min(len(mine), len(theirs))
    return (mine[n] if len(mine) > n else None), (theirs[n] if len(theirs) > n else None)


def _what(p: Parting) -> str:
    """What the odd rank did differently in the step, in words."""
    mine, theirs = p.mine, p.theirs
    a, b = _first_difference(mine.calls, theirs.calls)
    if mine.seq != theirs.seq:
        return (f"its collective count was already {mine.seq - theirs.seq:+d} apart from the "
                f"others' when step {p.step} began (they parted before the {WINDOW} steps "
                f"kept)")
    if mine.count < theirs.count:
        which = f"; the first it did not make: {describe_call(b)}" if b else \
            " (one of the collectives torch makes itself, e.g. DDP's gradient all-reduce)"
        return (f"skipped {theirs.count - mine.count} collective(s) in step {p.step}: it "
                f"issued {mine.count} where the others issued {theirs.count}{which}")
    if mine.count > theirs.count:
        which = f"; the first extra one: {describe_call(a)}" if a else \
            " (one of the collectives torch makes itself, e.g. DDP's gradient all-reduce)"
        return (f"made {mine.count - theirs.count} extra collective(s) in step {p.step}: it "
                f"issued {mine.count} where the others issued {theirs.count}{which}")
    return (f"called {describe_call(a) if a else 'nothing'} in step {p.step} where the others "
            f"called {describe_call(b) if b else 'nothing'}")


def _hosts(states: Mapping[int, RankState | None], ranks: Iterable[int]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(s.host for s in (states.get(r) for r in ranks)
                               if s is not None and s.host))


def _digest_line(ranks: Sequence[int], d: StepDigest) -> str:
    calls = "; ".join(describe_call(c) for c in d.calls) or "no Python collective"
    return (f"rank(s) {names(ranks)}: step {d.step} began after collective seq {d.seq} and "
            f"issued {d.count} ({calls})")


def parting_diagnosis(snapshot: Snapshot, p: Parting) -> Diagnosis:
    states = snapshot.states
    first = p.odd[0]
    summary = (f"collectives parted: {name(states, first)} {_what(p)}; nothing hangs while "
               f"the sizes match: from then on the ranks reduce different steps' tensors "
               f"together")
    if len(p.odd) > 1:
        summary += f" (also rank(s) {names(p.odd[1:])})"
    evidence = (_digest_line(p.odd, p.mine), _digest_line(p.others, p.theirs))
    return Diagnosis("collective-mismatch", summary, p.odd, _hosts(states, p.odd), evidence,
                     HINT)


# -- the end of the loop -----------------------------------------------------------------------

@dataclass(frozen=True)
class EndApart:
    """Ranks that said goodbye after collective ``last`` while others issued more."""

    done: tuple[int, ...]
    last: int
    calling: tuple[int, ...]


def ended_apart(snapshot: Snapshot) -> EndApart | None:
    """Some ranks said goodbye after seq ``last`` while others issued a later one (never
    matched)."""
    done = sorted(r for r, why in snapshot.gone.items() if finished(why))
    if not done:
        return None
    last = max(issued(snapshot.states.get(r)) for r in done)
    calling = sorted(r for r, s in snapshot.states.items()
                     if r not in done and s is not None and issued(s) > last)
    if not calling:
        return None
    return EndApart(tuple(done), last, tuple(calling))


def _beyond(state: RankState | None, last: int) -> str:
    record = next((r for r in (state.recent if state is not None else ())
                   if r.seq == last + 1), None)
    return describe(record) if record is not None else f"collective seq {last + 1}"


def end_diagnosis(snapshot: Snapshot, e: EndApart) -> Diagnosis:
    states = snapshot.states
    extra = len(e.calling) <= len(e.done)
    first = e.calling[0]
    beyond = _beyond(states.get(first), e.last)
    if extra:
        named = e.calling
        summary = (f"an extra collective at the end: {name(states, first)} called {beyond} "
                   f"after rank(s) {names(e.done)} finished with seq {e.last}: "
                   f"nobody will ever match it")
    else:
        named = e.done
        summary = (f"{name(states, e.done[0])} stopped calling collectives (finished after "
                   f"seq {e.last}) while rank(s) {names(e.calling)} went on to {beyond}: "
                   f"they wait for it forever")
    evidence = (f"rank(s) {names(e.done)} said goodbye after collective seq {e.last}",
                *(f"{name(states, r)} issued up to seq {issued(states.get(r))}"
                  for r in e.calling[:8]))
    return Diagnosis("collective-mismatch", summary, tuple(named), _hosts(states, named),
                     evidence, HINT)


def detect(snapshot: Snapshot) -> Diagnosis | None:
    """The end of a loop apart, else the first step whose digests disagree, else None."""
    end = ended_apart(snapshot)
    if end is not None:
        return end_diagnosis(snapshot, end)
    parting = first_parting(snapshot)
    return parting_diagnosis(snapshot, parting) if parting is not None else None

