"""Whether a rank works or is stuck: its CPU time, I/O bytes and Python stack (docs/watch.md, "A
working rank is not a hang"). The :class:`Sampler` (edge) reads ``/proc`` and
``sys._current_frames()``; without ``/proc`` what it reads is None."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any

from ddpnet.watch.state import RankState, Snapshot, flat_fields

#: where a rank's heartbeat publishes its activity (``RankState.extra``)
KEY = "activity"
#: the watch's own threads (heartbeat, probes): their CPU is not the rank's work
WATCH_THREADS = "ddpnet-watch"
#: CPU above this share of one core over a sample's interval is work (asleep: ~0)
CPU_SHARE = 0.05
#: bytes read or written in one interval that are work
IO_BYTES = 64 * 1024
#: a rank that moved within this many seconds is working now (a sample a second, and one late)
STILL_S = 2.5
#: innermost frames kept of the main thread's stack
DEPTH = 4
#: distinct stacks remembered: a stack seen among them is no movement
SEEN = 8
#: the main thread in this file waits on a child (``subprocess.run``): its CPU is the rank's
SUBPROCESS = "subprocess.py:"
#: a sample younger than this is served again to the heartbeats sharing a process
FRESH_S = 0.5
#: seconds between listings of the process's children while it stands still
CHILDREN_EVERY_S = 5.0


@dataclass(frozen=True)
class Activity:
    """One sample of a rank's work and when each part last moved (0.0: never); None: unknown."""

    at: float = 0.0
    cpu: float | None = None       # process CPU s, the watch's threads out, children in
    main_cpu: float | None = None  # the main thread's CPU s
    read: int | None = None        # bytes read (rchar), the sampler's own reads out
    written: int | None = None     # bytes written (wchar)
    stack: tuple[str, ...] = ()    # the main thread's innermost frames, innermost first
    call: str = ""                 # the library function the user's code is in
    user: str = ""                 # the innermost frame of the user's code, "train.py:88 in main"
    share: float | None = None     # cores of CPU used over the last interval
    cpu_at: float = 0.0
    io_at: float = 0.0
    stack_at: float = 0.0

    @property
    def active_at(self) -> float:
        """When the rank last moved meaningfully (0.0: never seen)."""
        return max(self.cpu_at, self.io_at, self.stack_at)

    def to_dict(self) -> dict[str, Any]:
        out = flat_fields(self)
        out["stack"] = list(self.stack)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Activity:
        """ValueError or TypeError when a field has the wrong type (the hub judges by it)."""
        values = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        values["stack"] = tuple(str(f) for f in values.get("stack", ()))
        for key in ("at", "cpu_at", "io_at", "stack_at"):
            values[key] = float(values.get(key, 0.0))
        for key, kind in (("cpu", float), ("main_cpu", float), ("share", float),
                          ("read", int), ("written", int)):
            if values.get(key) is not None:
                values[key] = kind(values[key])
        values["call"], values["user"] = str(values.get("call", "")), str(values.get("user", ""))
        return cls(**values)


@dataclass(frozen=True)
class Movement:
    """What moved between two samples (:func:`working`); ``working`` None: nothing known."""

    working: bool | None
    cpu: bool = False
    io: bool = False
    stack: bool = False
    why: str = ""


def working(prev: Activity, now: Activity, seen: Sequence[tuple[str, ...]] = ()) -> Movement:
    """Whether the rank moved between ``prev`` and ``now`` (pure): CPU, I/O or a new stack."""
    wall = now.at - prev.at
    why = []
    cpu = io = False
    if wall > 0 and now.cpu is not None and prev.cpu is not None:
        share = (now.cpu - prev.cpu) / wall
        cpu = share >= CPU_SHARE
        why += [f"CPU {100 * share:.0f}%"] if cpu else []
    moved = [(n - p, what) for n, p, what in ((now.read, prev.read, "read"),
                                             (now.written, prev.written, "wrote"))
             if n is not None and p is not None]
    for delta, what in moved:
        if delta >= IO_BYTES:
            io = True
            why.append(f"{what} {size(delta)}")
    stack = bool(now.stack) and now.stack != prev.stack and now.stack not in seen
    why += ["its stack changed"] if stack else []
    known = (now.cpu is not None and prev.cpu is not None) or bool(moved) or bool(now.stack)
    return Movement(cpu or io or stack if known else None, cpu, io, stack, ", ".join(why))


def size(n: float) -> str:
    """``12.3 MB``: bytes for people (powers of 1000)."""
    for unit in ("B", "kB", "MB"):
        if abs(n) < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def of(state: RankState | None) -> Activity | None:
    """The activity a rank published, None when it published none (pure)."""
    data = state.extra.get(KEY) if state is not None else None
    if not isinstance(data, Mapping):
        return None
    try:
        return Activity.from_dict(data)
    except (TypeError, ValueError):
        return None


def idle_for(snapshot: Snapshot, rank: int) -> float | None:
    """Seconds since ``rank`` last moved as of the snapshot; None: no activity published."""
    found = of(snapshot.states.get(rank))
    if found is None or found.active_at <= 0:
        return None
    return snapshot.since(rank, found.active_at)


def doing(found: Activity, since: Activity | None = None) -> str:
    """What a rank does, for people (pure): its main thread's place, CPU and bytes since
    ``since``."""
    where = found.stack[0] if found.stack else "?"
    if found.call and found.user:
        where = f"{found.call}, called at {found.user}"
    elif found.user:
        where = f"at {found.user}"
    parts = [where]
    if found.share is not None:
        parts.append(f"CPU {100 * found.share:.0f}%")
    base = since or Activity()  # none: no bytes since
    for now, then, what in ((found.written, base.written, "wrote"),
                            (found.read, base.read, "read")):
        if now is not None and then is not None and now - then >= IO_BYTES:
            parts.append(f"{what} {size(now - then)} since")
    return ", ".join(parts)


_TICK = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, ValueError):
        return None


def thread_cpu(task: Path) -> float | None:
    """A thread's (or process's) user + system CPU seconds from its ``stat``."""
    text = _read(task / "stat")
    if text is None:
        return None
    try:
        fields = text[text.rindex(")") + 2:].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (ValueError, IndexError):
        return None


def io_bytes(task: Path) -> tuple[int, int] | None:
    """(rchar, wchar) from ``io``; None where the kernel has no I/O accounting."""
    text = _read(task / "io")
    if text is None:
        return None
    found = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name in ("rchar", "wchar"):
            found[name] = int(value)
    return (found["rchar"], found["wchar"]) if len(found) == 2 else None


def _library(path: str) -> str | None:
    """``torch/serialization.py`` (site-packages), ``threading.py`` (stdlib); None: user's."""
    for mark in ("site-packages/", "dist-packages/"):
        if mark in path:
            return path.rsplit(mark, 1)[1]
    stdlib = os.path.dirname(os.__file__) + os.sep
    if path.startswith(stdlib) or path.startswith("<"):
        return path[len(stdlib):] if path.startswith(stdlib) else path
    return None


class Sampler:
    """Samples this process's activity (edge; from any thread). Watch threads leave their CPU out
    themselves (:meth:`note_watch`: cheaper than /proc per thread); the sampler's own /proc reads
    are left out of the bytes read."""

    def __init__(self, proc: str = "/proc/self",
                 main: threading.Thread | None = None) -> None:
        self.proc = Path(proc)
        self.main = main or threading.main_thread()
        self.prev: Activity | None = None
        self.seen: deque[tuple[str, ...]] = deque(maxlen=SEEN)
        #: CPU seconds the watch's threads noted, and each one's last note (thread-local)
        self.watch_cpu = 0.0
        self.local = threading.local()
        #: bytes the sampler itself read (its /proc reads) since the first sample
        self.own_reads = 0
        #: children (psutil.Process by pid), their CPU, those skipped, and the workers
        self.children: dict[int, Any] = {}
        self.child_cpu: dict[int, float] = {}
        self.skip: set[int] = set()
        self.workers: set[int] = set()
        self.listed = -CHILDREN_EVERY_S
        #: CPU accumulated, only forward: the process's (watch out), and its children's
        self.own_cpu = 0.0
        self.kids_cpu = 0.0
        #: py path -> (shown name, library or not), each classified once
        self.names: dict[str, tuple[str, bool]] = {}
        self.lock = threading.Lock()

    def note_watch(self) -> None:
        """From a watch thread: the CPU it used since its last note is not the rank's work."""
        if not threading.current_thread().name.startswith(WATCH_THREADS):
            return
        now = time.thread_time()
        last = getattr(self.local, "cpu", 0.0)
        self.local.cpu = now
        with self.lock:
            self.watch_cpu += max(0.0, now - last)

    def sample(self, max_age: float = 0.0) -> Activity:
        """A new sample, or the last one while younger than ``max_age``. The calling thread's CPU is
        noted first, else the heartbeat's own work reads as the rank's."""
        self.note_watch()
        try:
            with self.lock:
                prev = self.prev
                if prev is not None and 0 <= time.time() - prev.at < max_age:
                    return prev
                found = self._sample(prev)
                self.prev = found
                return found
        finally:
            self.note_watch()

    def _sample(self, prev: Activity | None) -> Activity:
        now = time.time()
        before = io_bytes(self.proc)
        main = self.main.native_id
        main_cpu = thread_cpu(self.proc / "task" / str(main)) if main else None
        spent = time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID) - self.watch_cpu
        self.own_cpu = max(self.own_cpu, spent)  # only forward
        stack, call, user = self.stack()
        # children are listed (a scan of /proc) only while the process stands still
        waits = any(f.startswith(SUBPROCESS) for f in (*stack, call))
        cpu = self.own_cpu + self._children(time.monotonic(), listing=prev is None or
                                            prev.active_at < prev.at, waits=waits)
        after = io_bytes(self.proc)
        read = written = None
        if before is not None:
            read, written = before[0] - self.own_reads, before[1]
            if after is not None:  # what this sample read, from /proc: not the rank's work
                self.own_reads += max(0, after[0] - before[0])
        raw = Activity(now, cpu, main_cpu, read, written, stack, call, user)
        if prev is None:
            found = replace(raw, cpu_at=now, io_at=now, stack_at=now)
        else:
            moved = working(prev, raw, tuple(self.seen))
            wall = now - prev.at
            share = (cpu - prev.cpu) / wall if prev.cpu is not None and wall > 0 else None
            found = replace(raw, share=None if share is None else round(share, 3),
                            cpu_at=now if moved.cpu else prev.cpu_at,
                            io_at=now if moved.io else prev.io_at,
                            stack_at=now if moved.stack else prev.stack_at)
        if stack and stack not in self.seen:
            self.seen.append(stack)
        return found

    def _children(self, mono: float, *, listing: bool, waits: bool) -> float:
        """CPU seconds the children used since first seen: workers' always, others' only while the
        main thread ``waits`` on a subprocess, the hub's never."""
        import psutil

        if listing and mono - self.listed >= CHILDREN_EVERY_S:
            self.listed = mono
            self._list_children(psutil)
        for pid, child in list(self.children.items()):
            try:
                times = child.cpu_times()
            except (psutil.Error, OSError):
                self.children.pop(pid)
                self.child_cpu.pop(pid, None)
                continue
            spent = times.user + times.system
            last = self.child_cpu.get(pid)
            if last is not None and (pid in self.workers or waits):
                self.kids_cpu += max(0.0, spent - last)
            self.child_cpu[pid] = spent
        return self.kids_cpu

    def _list_children(self, psutil: Any) -> None:
        try:
            me = psutil.Process()
            found, own = me.children(recursive=True), me.cmdline()
        except (psutil.Error, OSError):
            return
        for child in found:
            if child.pid in self.children or child.pid in self.skip:
                continue
            try:
                cmd = child.cmdline()
            except (psutil.Error, OSError):
                continue
            if "ddpnet.watch" in " ".join(cmd):
                self.skip.add(child.pid)
                continue
            self.children[child.pid] = child
            if cmd == own or "multiprocessing" in " ".join(cmd):
                self.workers.add(child.pid)

    def stack(self) -> tuple[tuple[str, ...], str, str]:
        """The main thread's innermost frames, the library call it is in, the user's innermost
        frame."""
        frame: FrameType | None = sys._current_frames().get(self.main.ident or -1)
        frames: list[str] = []
        call = user = ""
        while frame is not None and not user:
            code = frame.f_code
            name, library = self._name(code.co_filename)
            line = f"{name}:{frame.f_lineno} in {code.co_name}"
            if len(frames) < DEPTH:
                frames.append(line)
            if library:
                call = line
            else:
                user = line
            frame = frame.f_back
        if not user:
            call = ""
        return tuple(frames), call, user

    def _name(self, path: str) -> tuple[str, bool]:
        found = self.names.get(path)
        if found is None:
            library = _library(path)
            found = (library, True) if library is not None else (os.path.basename(path), False)
            self.names[path] = found
        return found


_shared: Sampler | None = None
_shared_lock = threading.Lock()


def shared() -> Sampler:
    """This process's sampler, shared by all heartbeats it runs."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Sampler()
        return _shared
