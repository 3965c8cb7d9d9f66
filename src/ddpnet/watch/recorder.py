"""What this rank is doing: its last collectives (torch's Flight Recorder, which sees DDP's C++
all-reduces), its phase and step. Python collectives are also announced *before* they run
(:meth:`Recorder.wrap_collectives`): gloo aborts on a wrong size before any heartbeat."""

from __future__ import annotations

import os
import sys
import threading
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import wrapt

from ddpnet.watch import flight, patches
from ddpnet.watch.desync import StepLog
from ddpnet.watch.state import LONG_PHASES, PHASES, STEP_BUCKETS, CollectiveRecord

#: entries the Flight Recorder keeps per process (its ring); we publish the last RING
FR_ENTRIES = 64
RING = 32
#: finished steps, timed spans and marks kept until the heartbeat takes them
STEP_WINDOW = 256
WAIT_SPANS = 4096
MARKS = 2048
#: the files whose frames are the watch's own, not a call site: this package's and wrapt's
_OWN_DIRS = (os.path.dirname(os.path.abspath(__file__)),
             os.path.dirname(os.path.abspath(wrapt.__file__)))


def from_flight_recorder(dump: Mapping[str, Any]) -> tuple[CollectiveRecord, ...]:
    return flight.records(flight.parse(dump), RING)


def flight_recorder(backend: str = "") -> Mapping[str, Any] | None:
    """This process's Flight Recorder dump without stacks (they cost seconds), or None (edge);
    NCCL's own for NCCL, the only one that knows whether an async collective finished."""
    import pickle

    import torch._C._distributed_c10d as c10d

    dump = getattr(c10d, "_dump_nccl_trace" if backend == "nccl" else "_dump_fr_trace", None)
    if dump is None:
        return None
    try:  # a pickle of our own process's recorder
        data: Mapping[str, Any] = pickle.loads(dump(True, False, False))
    except Exception:  # torch raises RuntimeError when no group recorded yet
        return None
    return data


def _with_call(fr: CollectiveRecord, call: CollectiveRecord | None) -> CollectiveRecord:
    """A Flight Recorder record with the announced call's site, and its end where gloo retired it
    without one; one not retired is in flight (NCCL returns once queued)."""
    from dataclasses import replace

    if call is None:
        return fr
    out = fr if fr.site else replace(fr, site=call.site)
    if call.ended is not None and out.ended is not None and out.ended == out.started:
        out = replace(out, started=call.started, ended=call.ended, state="completed")
    return out


def merge(fr: tuple[CollectiveRecord, ...], called: Iterable[CollectiveRecord]
          ) -> tuple[CollectiveRecord, ...]:
    """The Flight Recorder's records with announced sites, plus announced calls not yet in it
    (pure)."""
    mine = {(r.group, r.seq): r for r in called}
    last = fr[-1].seq if fr else 0
    out = [_with_call(r, mine.get((r.group, r.seq))) for r in fr]
    seen = {(r.group, r.seq) for r in fr}
    out += [r for r in called if (r.group, r.seq) not in seen and r.seq > last]
    return tuple(sorted(out, key=lambda r: (r.started, r.seq)))[-RING:]


class Recorder:
    """The rank's phase, step and announced calls: the training thread writes, the heartbeat
    reads."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.lock = threading.Lock()
        self.phase, self.phase_since = "", clock()
        #: the long phase in effect, since when, and how many ``with`` blocks hold it
        self.long_phase, self.long_since, self.long_held = "", 0.0, 0
        self.step, self.step_started = -1, 0.0
        #: (time, is a step) of each phase or step change; whether some were dropped since
        self.marks: deque[tuple[float, bool]] = deque(maxlen=MARKS)
        self.marks_dropped = False
        self.spans: deque[tuple[float, float]] = deque(maxlen=STEP_WINDOW)
        #: every finished step since start per STEP_BUCKETS bucket (``spans`` may drop some)
        self.step_counts = [0] * (len(STEP_BUCKETS) + 1)
        self.step_seconds = 0.0
        self.called: deque[CollectiveRecord] = deque(maxlen=RING)
        self.waits: deque[tuple[float, float]] = deque(maxlen=WAIT_SPANS)
        self.announce: Callable[[CollectiveRecord], None] = lambda _record: None
        self.use_fr = True
        self.backend = ""
        #: collectives issued so far in the default group, and each step's digest of them
        self.issued: Callable[[], int] = lambda: 0
        self.steps = StepLog()
        #: whether the user marks steps / phases: then inferred ones (``watch.infer``) are not
        self.marked_steps = False
        self.marked_phases = False
        #: the collectives' wrappers: a failure of ours turns announcing off, said once
        self.guard = patches.Warns("collectives are no longer announced",
                                   "the Flight Recorder still records them; report the "
                                   "warning to ddpnet")

    def set_phase(self, phase: str, inferred: bool = False) -> None:
        if inferred and self.marked_phases:
            return
        if phase not in PHASES:
            from ddpnet.errors import ConfigError

            raise ConfigError(f"phase {phase!r} is not one of {', '.join(p for p in PHASES if p)}",
                              "use ddpnet.phase('data'|'forward'|'backward'|'step'|...)")
        if not inferred and phase not in LONG_PHASES:
            # a long phase alone leaves the inferred phases on (the long one held)
            self.marked_phases = True
        with self.lock:
            if phase != self.phase:
                self.phase, self.phase_since = phase, self.clock()
                self._mark(self.phase_since, False)
            if phase in LONG_PHASES:
                if phase != self.long_phase:
                    self.long_phase, self.long_since = phase, self.phase_since
            elif not self.long_held:
                self.long_phase = ""

    def hold_long(self) -> None:
        """A ``with ddpnet.phase(<long phase>)`` block entered (:meth:`restore` leaves it)."""
        with self.lock:
            self.long_held += 1

    def restore(self, phase: str, long_phase: str, long_since: float, held: int) -> None:
        """Back to the phase and long phase before a ``with ddpnet.phase(...)`` block."""
        with self.lock:
            if phase != self.phase:
                self.phase, self.phase_since = phase, self.clock()
                self._mark(self.phase_since, False)
            self.long_phase, self.long_since = long_phase, long_since
            self.long_held = max(0, self.long_held - held)

    def set_step(self, step: int, inferred: bool = False) -> None:
        if inferred and self.marked_steps:
            return
        self.marked_steps = self.marked_steps or not inferred
        now = self.clock()
        issued = self.issued()
        with self.lock:
            if self.step_started and step != self.step:
                self.spans.append((self.step_started, now))
                self.step_counts[bisect_left(STEP_BUCKETS, now - self.step_started)] += 1
                self.step_seconds += now - self.step_started
            if step != self.step:
                self.steps.begin(step, issued)
                self._mark(now, True)
            self.step, self.step_started = step, now

    def _mark(self, when: float, step: bool) -> None:
        """A phase or step change at ``when`` (under the lock)."""
        if len(self.marks) == MARKS:
            self.marks_dropped = True
        self.marks.append((when, step))

    def take_marks(self) -> tuple[tuple[tuple[float, bool], ...], bool]:
        """The marks since the last call, oldest first, and whether they are all of them."""
        with self.lock:
            marks, complete = tuple(self.marks), not self.marks_dropped
            self.marks.clear()
            self.marks_dropped = False
        return marks, complete

    def digest(self) -> dict[str, Any]:
        issued = self.issued()
        with self.lock:
            return self.steps.digest(issued)

    def take_spans(self) -> list[tuple[float, float]]:
        with self.lock:
            spans = list(self.spans)
            self.spans.clear()
        return spans

    def step_totals(self) -> tuple[tuple[int, ...], float]:
        """Every finished step since start per STEP_BUCKETS bucket, and their seconds."""
        with self.lock:
            return tuple(self.step_counts), self.step_seconds

    def add_wait(self, start: float, end: float) -> None:
        """A collective a comm hook timed (gloo's Flight Recorder leaves DDP's buckets without an
        end)."""
        with self.lock:
            self.waits.append((start, end))

    def take_waits(self, since: float, until: float) -> list[tuple[float, float]]:
        """The timed spans that end after ``since``; those ending by ``until`` are dropped."""
        with self.lock:
            out = [w for w in self.waits if w[1] > since]
            while self.waits and self.waits[0][1] <= until:
                self.waits.popleft()
        return out

    def records(self) -> tuple[CollectiveRecord, ...]:
        fr = flight_recorder(self.backend) if self.use_fr else None
        with self.lock:
            called = tuple(self.called)
        if fr is None:
            return called[-RING:]
        return merge(from_flight_recorder(fr), called)

    def called_record(self, op: str, first: Any, seq: int) -> CollectiveRecord:
        """The announced record of a collective whose first argument (tensor or list) is
        ``first``."""
        tensor = first if hasattr(first, "shape") else None
        if isinstance(first, list) and first and hasattr(first[0], "shape"):
            tensor = first[0]
        dtype = str(tensor.dtype).removeprefix("torch.") if tensor is not None else ""
        shape = tuple(int(n) for n in tensor.shape) if tensor is not None else ()
        return CollectiveRecord(seq=seq, op=op, group="default_pg", dtype=dtype, shape=shape,
                                nbytes=flight.prod(shape) * flight.ITEMSIZE.get(dtype, 0),
                                started=self.clock(), site=call_site())

    def wrap_collectives(self, dist: Any, next_seq: Callable[[], int]) -> Callable[[], None]:
        """Announce each default-group Python collective before it runs; the undo."""
        group_type = getattr(dist, "ProcessGroup", None)
        undos = [self._wrap(dist, name, next_seq, group_type)
                 for name in patches.COLLECTIVES if callable(getattr(dist, name, None))]

        def undo() -> None:
            for step in reversed(undos):
                step()

        return undo

    def _wrap(self, dist: Any, name: str, next_seq: Callable[[], int],
              group_type: type | None) -> Callable[[], None]:
        function = getattr(dist, name)
        positional = _positional(function)
        group_at, async_at = (positional.index(n) if n in positional else None
                              for n in ("group", "async_op"))
        first = positional[0] if positional else ""

        def before(_instance: object, args: tuple[Any, ...], kwargs: dict[str, Any]
                   ) -> CollectiveRecord | None:
            # another group's collective is not the default group's: it would pair wrongly
            if _argument(args, kwargs, group_at, "group") is not None or (
                    group_type is not None and any(isinstance(a, group_type) for a in args)):
                return None
            # the tensor by position or by keyword (DeepSpeed calls all_reduce(tensor=...))
            record = self.called_record(name, _argument(args, kwargs, 0, first), next_seq())
            with self.lock:
                self.called.append(record)
                self.steps.call((name, record.dtype, record.shape, record.site))
            self.announce(record)
            return record

        def after(_instance: object, args: tuple[Any, ...], kwargs: dict[str, Any],
                  _result: object, record: CollectiveRecord | None) -> None:
            if record is not None and not _argument(args, kwargs, async_at, "async_op"):
                self._ended(record)

        return patches.wrap(dist, name, self.guard, before=before, after=after)

    def _ended(self, record: CollectiveRecord) -> None:
        from dataclasses import replace

        with self.lock:
            if self.called and self.called[-1] is record:
                self.called[-1] = replace(record, ended=self.clock(), state="completed")


def call_site() -> str:
    """``file:line in function`` of the first frame outside the watch's and wrapt's files."""
    frame = sys._getframe(1)
    while frame.f_back is not None and \
            os.path.dirname(os.path.abspath(frame.f_code.co_filename)) in _OWN_DIRS:
        frame = frame.f_back
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno} in " \
           f"{frame.f_code.co_name}"


def _positional(function: Any) -> list[str]:
    """The names of ``function``'s positional parameters ([] where unreadable)."""
    import inspect

    try:
        params = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _argument(args: tuple[Any, ...], kwargs: dict[str, Any], at: int | None,
              name: str) -> Any:
    if name in kwargs:
        return kwargs[name]
    return args[at] if at is not None and len(args) > at else None
