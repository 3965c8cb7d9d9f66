"""torch's Flight Recorder dumps, parsed (pure): what "inside a collective" means where collectives
are asynchronous (docs/watch-causes.md, "NCCL: where collectives are asynchronous"). gloo leaves the
state at ``scheduled``: ``retired`` is what tells."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ddpnet.watch.state import CollectiveRecord

#: torch's dtype names in Flight Recorder dumps -> torch's usual names
DTYPES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16",
          "Int": "int32", "Long": "int64", "Byte": "uint8", "Char": "int8", "Bool": "bool",
          "Short": "int16"}
ITEMSIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8,
            "uint8": 1, "int8": 1, "bool": 1, "int16": 2}


@dataclass(frozen=True)
class FlightEntry:
    """One collective as the Flight Recorder holds it."""

    seq: int                     # collective_seq_id, per process group
    op: str                      # "all_reduce" (profiling_name without "nccl:"/"gloo:")
    backend: str                 # "nccl", "gloo", "" (the profiling_name's prefix)
    group: str                   # the process group's name ("default_pg")
    dtype: str
    shape: tuple[int, ...]
    state: str                   # "scheduled", "started", "completed"
    retired: bool
    created: float               # seconds since the epoch (time_created_ns)
    started: float | None        # time_discovered_started_ns
    completed: float | None      # time_discovered_completed_ns
    duration_ms: float | None    # GPU time, with TORCH_NCCL_ENABLE_TIMING only
    site: str                    # the user's frame, when the dump has stacks
    p2p: bool

    @property
    def done(self) -> bool:
        return self.retired or self.state == "completed"


@dataclass(frozen=True)
class GroupStatus:
    """``pg_status``: a group's last collective enqueued (called), started and completed."""

    group: str
    enqueued: int
    started: int
    completed: int


@dataclass(frozen=True)
class FlightDump:
    version: str
    entries: tuple[FlightEntry, ...]
    status: tuple[GroupStatus, ...]
    comm_lib_version: str = ""

    def in_flight(self) -> tuple[FlightEntry, ...]:
        """Collectives called and not finished, oldest first."""
        return tuple(e for e in self.entries if not e.done and not e.p2p)


def call_site(frames: Iterable[Mapping[str, Any]]) -> str:
    """``train.py:42 in step``: the innermost frame outside torch and ddpnet.watch."""
    for frame in frames:
        filename = str(frame.get("filename", ""))
        if not filename or f"{os.sep}torch{os.sep}" in filename or \
                f"ddpnet{os.sep}watch{os.sep}" in filename:
            continue
        return f"{os.path.basename(filename)}:{frame.get('line', '?')} in {frame.get('name', '?')}"
    return ""


def _seconds(ns: Any) -> float | None:
    return int(ns) / 1e9 if isinstance(ns, int | float) and ns else None


def _entry(raw: Mapping[str, Any]) -> FlightEntry:
    sizes = raw.get("input_sizes") or [[]]
    dtypes = raw.get("input_dtypes") or [""]
    dtype = DTYPES.get(str(dtypes[0]), str(dtypes[0]).lower())
    backend, _, op = str(raw.get("profiling_name", "?")).rpartition(":")
    group = raw.get("process_group") or ("", "default_pg")
    duration = raw.get("duration_ms")
    return FlightEntry(
        seq=int(raw.get("collective_seq_id", 0)), op=op, backend=backend,
        group=str(group[1] if len(group) > 1 else group[0]), dtype=dtype,
        shape=tuple(int(n) for n in sizes[0]) if sizes else (),
        state=str(raw.get("state", "")), retired=bool(raw.get("retired")),
        created=_seconds(raw.get("time_created_ns")) or 0.0,
        started=_seconds(raw.get("time_discovered_started_ns")),
        completed=_seconds(raw.get("time_discovered_completed_ns")),
        duration_ms=float(duration) if isinstance(duration, int | float) else None,
        site=call_site(raw.get("frames") or ()), p2p=bool(raw.get("is_p2p")))


def parse(dump: Mapping[str, Any]) -> FlightDump:
    """A Flight Recorder dump (the unpickled dict of either recorder) as frozen records."""
    names = {str(pg): str(cfg.get("name") or pg)
             for pg, cfg in dict(dump.get("pg_config") or {}).items() if isinstance(cfg, Mapping)}
    status = tuple(GroupStatus(names.get(str(pg), str(pg)),
                               int(s.get("last_enqueued_collective", -1)),
                               int(s.get("last_started_collective", -1)),
                               int(s.get("last_completed_collective", -1)))
                   for pg, s in dict(dump.get("pg_status") or {}).items()
                   if isinstance(s, Mapping))
    return FlightDump(version=str(dump.get("version", "")),
                      entries=tuple(_entry(e) for e in dump.get("entries", ())),
                      status=status, comm_lib_version=str(dump.get("comm_lib_version", "")))


def record(entry: FlightEntry) -> CollectiveRecord:
    """An entry as the watch's record: ``ended`` None while in flight; a finished gloo entry ends
    when created (``recorder.merge`` puts the announced call's end)."""
    ended = (entry.completed or entry.created) if entry.done else None
    return CollectiveRecord(seq=entry.seq, op=entry.op, group=entry.group, dtype=entry.dtype,
                            shape=entry.shape,
                            nbytes=prod(entry.shape) * ITEMSIZE.get(entry.dtype, 0),
                            started=entry.created, ended=ended,
                            state="completed" if entry.done else "started", site=entry.site)


def records(dump: FlightDump, keep: int) -> tuple[CollectiveRecord, ...]:
    """The last ``keep`` collectives (not point-to-point), oldest first."""
    return tuple(record(e) for e in dump.entries if not e.p2p)[-keep:]


def prod(shape: Iterable[int]) -> int:
    out = 1
    for n in shape:
        out *= int(n)
    return out
