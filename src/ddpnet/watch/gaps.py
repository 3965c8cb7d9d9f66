"""Each rank's own gaps between progress, and the summary it publishes (pure; docs/watch.md,
"Thresholds learned from the job"): a rank sees every event, the hub only heartbeats."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ddpnet.watch.state import CollectiveRecord

#: bucket i holds gaps in [LOW_S x RATIO^i, LOW_S x RATIO^(i+1)); the ends are open
LOW_S, RATIO, BUCKETS = 0.001, 1.25, 72
#: seconds of one epoch: a rank's summary covers the current and the previous one
EPOCH_S = 300.0
#: steps a rank finishes before its gaps teach (DDP builds, then rebuilds its buckets)
WARM_STEPS = 2
#: without step marks, collectives it finishes first
WARM_COLLECTIVES = 16
#: the time-weighted quantile published
QUANTILE = 0.99
#: where a rank's summary goes in ``RankState.extra``
KEY = "gaps"

#: one progress event: (time.time(), whether it is a step mark)
Event = tuple[float, bool]


def bucket(gap: float) -> int:
    """The histogram bucket of a gap of ``gap`` seconds."""
    if gap <= LOW_S:
        return 0
    return min(BUCKETS - 1, int(math.log(gap / LOW_S) / math.log(RATIO)))


@dataclass(frozen=True)
class Histogram:
    """Seconds spent in gaps per bucket, how many gaps and the longest."""

    seconds: tuple[float, ...] = (0.0,) * BUCKETS
    count: int = 0
    longest: float = 0.0

    def add(self, gaps: Sequence[float]) -> Histogram:
        if not gaps:
            return self
        seconds = list(self.seconds)
        for gap in gaps:
            seconds[bucket(gap)] += gap
        return Histogram(tuple(seconds), self.count + len(gaps), max(self.longest, *gaps))

    def merge(self, other: Histogram) -> Histogram:
        return Histogram(tuple(a + b for a, b in zip(self.seconds, other.seconds, strict=True)),
                         self.count + other.count, max(self.longest, other.longest))

    def quantile(self, q: float = QUANTILE) -> float:
        """The gap below which ``q`` of the time in gaps went (capped at the longest); 0 when
        empty."""
        total = sum(self.seconds)
        acc = 0.0
        for index, seconds in enumerate(self.seconds):
            acc += seconds
            if seconds and acc >= q * total:
                return min(LOW_S * RATIO ** (index + 1), self.longest)
        return 0.0


@dataclass(frozen=True)
class Summary:
    """What a rank publishes: gaps learned from, their time-weighted p99 and the longest."""

    count: int
    p99: float
    longest: float

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.count, "p99": round(self.p99, 4), "max": round(self.longest, 4)}

    @classmethod
    def from_dict(cls, data: Any) -> Summary | None:
        """None for anything that is not a summary (an older rank, a fixture)."""
        if not isinstance(data, Mapping):
            return None
        try:
            return cls(int(data["n"]), float(data["p99"]), float(data["max"]))
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class GapLog:
    """One rank's gaps so far (immutable: :func:`fold` returns the next log)."""

    current: Histogram = field(default_factory=Histogram)
    previous: Histogram = field(default_factory=Histogram)
    #: when the current epoch began (None: nothing folded yet)
    epoch: float | None = None
    #: the newest event folded, and the newest collective (group, seq) seen
    last: float | None = None
    seen: tuple[str, int] | None = None
    #: step marks seen, and when the rank was warm (gaps that begin before teach nothing)
    steps: int = 0
    warm_at: float | None = None

    def summary(self) -> Summary:
        both = self.current.merge(self.previous)
        return Summary(both.count, both.quantile(), both.longest)


def rotate(log: GapLog, now: float) -> GapLog:
    """A new epoch every EPOCH_S: the previous one is dropped."""
    if log.epoch is None:
        return replace(log, epoch=now)
    if now - log.epoch < EPOCH_S:
        return log
    previous = log.current if now - log.epoch < 2 * EPOCH_S else Histogram()
    return replace(log, current=Histogram(), previous=previous, epoch=now)


def overlaps(start: float, end: float, skip: Iterable[tuple[float, float]]) -> bool:
    return any(start <= to and end >= since for since, to in skip)


def fold(log: GapLog, events: Iterable[Event], *, now: float, complete_from: float = -math.inf,
         finished: int = 0, skip: Iterable[tuple[float, float]] = ()) -> GapLog:
    """``log`` with the gaps between ``events`` newer than its last. Events before ``complete_from``
    (a ring overflowed) count as steps but bound no gap; ``finished``: the collectives finished so
    far (warm-up without step marks)."""
    log, skip = rotate(log, now), tuple(skip)
    new = sorted(e for e in events if log.last is None or e[0] > log.last)
    prev = log.last if log.last is not None and log.last >= complete_from else None
    steps, warm_at, gaps = log.steps, log.warm_at, []
    for time, step in new:
        steps += step
        if time < complete_from:
            continue
        if prev is not None and warm_at is not None and prev >= warm_at and \
                not overlaps(prev, time, skip):
            gaps.append(time - prev)
        prev = time
        if warm_at is None and steps > WARM_STEPS:
            warm_at = time
    last = new[-1][0] if new else log.last
    if warm_at is None and steps == 0 and finished >= WARM_COLLECTIVES and last is not None:
        warm_at = last
    return replace(log, current=log.current.add(gaps), last=last, steps=steps, warm_at=warm_at)


def events(records: Sequence[CollectiveRecord], marks: Iterable[Event]) -> list[Event]:
    """A rank's progress events: collective starts, ends where known (not gloo's DDP buckets),
    marks."""
    out = list(marks)
    for record in records:
        out.append((record.started, False))
        if record.ended is not None and record.ended > record.started:
            out.append((record.ended, False))
    return out


def complete_from(records: Sequence[CollectiveRecord], seen: tuple[str, int] | None, ring: int,
                  marks: Sequence[Event], marks_complete: bool) -> float:
    """Since when ``records`` and ``marks`` hold every event (a full ring or mark ring dropped
    some)."""
    since = -math.inf
    keys = {(r.group, r.seq) for r in records}
    if len(records) >= ring and seen is not None and seen not in keys:
        since = min(r.started for r in records)
    if not marks_complete and marks:
        since = max(since, min(t for t, _ in marks))
    return since


def observe(log: GapLog, records: Sequence[CollectiveRecord], marks: Sequence[Event], *,
            marks_complete: bool, ring: int, now: float, finished: int,
            skip: Iterable[tuple[float, float]] = ()) -> GapLog:
    """One heartbeat's fold of the collectives' ring and the marks since the last."""
    since = complete_from(records, log.seen, ring, marks, marks_complete)
    newest = max(records, key=lambda r: (r.started, r.seq), default=None)
    out = fold(log, events(records, marks), now=now, complete_from=since, finished=finished,
               skip=skip)
    return out if newest is None else replace(out, seen=(newest.group, newest.seq))
