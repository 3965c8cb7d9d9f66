"""What a rank publishes each heartbeat (edge): its ``RankState`` from the recorder, with its
activity, its straggler window and its gap summary."""

from __future__ import annotations

import math
import threading
import time
from dataclasses import replace

from ddpnet.watch import activity, gaps
from ddpnet.watch.activity import Sampler
from ddpnet.watch.desync import KEY as DESYNC_KEY
from ddpnet.watch.gaps import GapLog, Summary
from ddpnet.watch.recorder import RING, Recorder
from ddpnet.watch.state import CollectiveRecord, RankState
from ddpnet.watch.straggler import StragglerWindow, waits_per_step
from ddpnet.watch.threshold import Threshold, teaches_nothing
from ddpnet.watch.transport import HubLink


class Publisher(HubLink):
    """The state part of a :class:`~ddpnet.watch.heartbeat.Beacon`."""

    recorder: Recorder
    #: the hub's last threshold (raised by any rank's long phase), and its learned base
    threshold: Threshold
    base: Threshold | None = None
    #: this rank's gaps, and the spans that teach nothing (:meth:`note_long`)
    gaps: GapLog
    long_seen: tuple[tuple[float, float], ...] = ()
    long_open = False
    #: an ack since the last beat said that gaps now teach nothing
    told_nothing = False
    #: seconds between heartbeats
    period: float
    #: set once the hub acked a state: a verdict can name this rank with its host
    known: threading.Event
    window: StragglerWindow
    window_lock: threading.Lock
    #: seconds every step taken from the recorder spent inside collectives (cumulative)
    wait_seconds = 0.0
    #: whether this rank works when it keeps the others waiting
    activity: Sampler

    def state(self) -> RankState:
        records = self.recorder.records()
        rec = self.recorder
        done = [r.seq for r in records if r.ended is not None]
        with self.window_lock:
            steps = rec.take_spans()
            if steps:
                timed = rec.take_waits(steps[0][0], steps[-1][1])
                spans = [(r.started, r.ended) for r in records if r.ended is not None]
                # a step older than a full ring's oldest collective would read as no wait
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

    def learn_gaps(self, records: tuple[CollectiveRecord, ...], finished: int) -> Summary:
        """Fold the progress events since the last beat into the gap log; the summary it
        publishes."""
        rec, now = self.recorder, time.time()
        marks, complete = rec.take_marks()
        self.note_long(rec.long_phase, rec.long_since, now)
        self.gaps = gaps.observe(self.gaps, records, marks, marks_complete=complete, ring=RING,
                                 now=now, finished=finished, skip=self.long_seen)
        return self.gaps.summary()

    def note_long(self, own: str, since: float, now: float) -> None:
        """Note spans that teach nothing: this rank's own long phase, and a point now while
        ``threshold.teaches_nothing`` (a gap waiting on it spans the point)."""
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
