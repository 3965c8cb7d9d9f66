"""What ranks publish (``CollectiveRecord``, ``RankState``), what the hub and ``ddpnet diagnose``
read (``Snapshot``) and what the analysis returns (``Diagnosis``): frozen dataclasses that
round-trip through JSON, so a live store, a dump file and a fixture are the same thing."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: training phases a rank can be in (``ddpnet.phase(...)`` or ``ddpnet train``); "" = unmarked
PHASES = ("", "data", "forward", "backward", "step", "checkpoint", "eval", "warmup")
#: phases that may keep the others waiting long: each has its own allowance
LONG_PHASES = ("warmup", "checkpoint", "eval")

#: upper bounds (seconds) of the step-time buckets (``ddpnet_step_seconds``)
STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0)

#: the kinds of diagnosis, in the order the analysis tries them (first match wins)
KINDS = (
    "rank-gone",            # a rank's process died or its host stopped answering
    "collective-mismatch",  # same seq, different op/shape/dtype, or a rank skipped one
    "rank-not-arriving",    # one rank is behind (compute or data loading) while others wait
    "network",              # all ranks inside the same collective, nobody progressing
    "straggler",            # no hang: one rank or link consistently slower
)


def flat_fields(obj: Any) -> dict[str, Any]:
    """A flat dataclass's fields as a dict, without ``asdict``'s deep copy (too slow for a state a
    second per rank); callers convert what nests."""
    return {name: getattr(obj, name) for name in obj.__dataclass_fields__}


@dataclass(frozen=True)
class CollectiveRecord:
    """One collective call on one rank."""

    seq: int                       # per process group, from 1 in call order
    op: str                        # "all_reduce", "broadcast", "barrier", "allgather", ...
    group: str = "default"         # process group name
    dtype: str = ""                # "float32"; "" when no tensor (barrier)
    shape: tuple[int, ...] = ()    # of the (first) tensor
    nbytes: int = 0
    started: float = 0.0           # time.time() when called
    ended: float | None = None     # None while in flight
    state: str = "started"         # the Flight Recorder's: scheduled, started, completed, failed
    site: str = ""                 # "train.py:42 in step" when known

    def to_dict(self) -> dict[str, Any]:
        out = flat_fields(self)
        out["shape"] = list(self.shape)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CollectiveRecord:
        values = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        values["shape"] = tuple(int(x) for x in values.get("shape", ()))
        return cls(**values)


@dataclass(frozen=True)
class RankState:
    """A rank's progress as published by its heartbeat (and written to its dump file)."""

    rank: int
    world_size: int
    host: str = ""
    pid: int = 0
    interface: str = ""            # the interface the selector chose, e.g. "eth0"
    address: str = ""              # its address, what peers connect to
    step: int = -1                 # last step begun; -1 unknown
    phase: str = ""                # one of PHASES
    phase_since: float = 0.0       # time.time() the phase began
    last_seq: int = 0              # last completed collective seq (default group)
    recent: tuple[CollectiveRecord, ...] = ()   # the ring, oldest first
    step_times: tuple[float, ...] = ()          # seconds per step, last K steps
    wait_times: tuple[float, ...] = ()          # seconds inside collectives per step, last K
    published: float = 0.0         # time.time() of this heartbeat
    extra: Mapping[str, Any] = field(default_factory=dict)
    long_phase: str = ""           # the LONG_PHASES one this rank is inside, "" when none
    long_since: float = 0.0        # time.time() it began
    #: since the rank started: steps per STEP_BUCKETS bucket (each its own count, the last
    #: above 120 s), their seconds and their seconds inside collectives
    step_counts: tuple[int, ...] = ()
    step_seconds: float = 0.0
    wait_seconds: float = 0.0

    @property
    def steps_done(self) -> int:
        """Steps this rank finished since it started (cumulative)."""
        return sum(self.step_counts)

    def in_flight(self) -> CollectiveRecord | None:
        """The oldest collective this rank has started and not finished."""
        return next((c for c in self.recent if c.ended is None), None)

    def to_dict(self) -> dict[str, Any]:
        out = flat_fields(self)
        out["recent"] = [c.to_dict() for c in self.recent]
        out["step_times"] = list(self.step_times)
        out["wait_times"] = list(self.wait_times)
        out["step_counts"] = list(self.step_counts)
        out["extra"] = dict(self.extra)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RankState:
        values = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        values["recent"] = tuple(CollectiveRecord.from_dict(c) for c in values.get("recent", ()))
        values["step_times"] = tuple(float(x) for x in values.get("step_times", ()))
        values["wait_times"] = tuple(float(x) for x in values.get("wait_times", ()))
        values["step_counts"] = tuple(int(x) for x in values.get("step_counts", ()))
        values["extra"] = dict(values.get("extra", {}))
        return cls(**values)


@dataclass(frozen=True)
class LinkProbe:
    """What probing one pair found (filled only when the analysis asks for probes)."""

    src_rank: int
    dst_rank: int
    reachable: bool
    detail: str = ""               # "connect timed out after 2.0 s", "mtu 1500 < 9000"
    rate_gbps: float | None = None
    what: str = "connect"          # "connect" (one port) or "stream" (data: MTU and rate)
    port: int = 0                  # the peer's port probed
    purpose: str = ""              # which listener: "side", "backend", "sink" (watch.probe)
    outcome: str = ""              # net.probe's outcome ("connected", "refused", "timeout",
                                   # "unreachable", ...), or "stalled" for a stream
    rtt_s: float | None = None     # a stream's smoothed round trip (the kernel's TCP_INFO)

    def to_dict(self) -> dict[str, Any]:
        return flat_fields(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LinkProbe:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


#: what a ``network`` verdict found (``Diagnosis.sub_kind``), for ``launch.blame``
LINK_DOWN, FIREWALL, CUT_OFF, MTU, SLOW_LINK = "link-down", "firewall", "cut-off", "mtu", \
    "slow-link"
#: the hub's node or its link is down, as a rank cut from it alone sees it; the hub is gone or
#: stuck; every rank waits on the network and nothing was probed yet
HUB_UNREACHABLE, HUB_SILENT, UNPROBED = "hub-unreachable", "hub-silent", "unprobed"
SUB_LABELS = {LINK_DOWN: "link down", FIREWALL: "firewall", CUT_OFF: "cut off", MTU: "MTU",
              SLOW_LINK: "slow link"}


#: how a rank that died of a peer's failure is said to have left (named after the cause)
PEER_FAILED = "stopped by a peer's failure: "
#: ranks of each list :meth:`Snapshot.around` keeps (the ranks a verdict names; those gone)
AROUND_LIMIT = 64


def victim(why: str) -> bool:
    """Whether a rank left because a peer failed (pure)."""
    return why.startswith(PEER_FAILED)


#: how a rank that said goodbye (``ddpnet.shutdown()``, a clean exit) is said to have left
FINISHED = "finished normally (said goodbye)"


def finished(why: str) -> bool:
    """Whether a rank left by finishing (pure)."""
    return why.startswith(FINISHED)


@dataclass(frozen=True)
class Snapshot:
    """Every rank's last state (None: never published) at ``taken``; ``gone``: ranks that left, with
    why; ``ages``: seconds since the hub received each state. A rank's clock may be minutes off:
    every age and wait goes through :meth:`age` and :meth:`since`."""

    world_size: int
    taken: float
    states: Mapping[int, RankState | None]
    gone: Mapping[int, str] = field(default_factory=dict)
    probes: tuple[LinkProbe, ...] = ()
    ages: Mapping[int, float] = field(default_factory=dict)

    def age(self, rank: int) -> float:
        """Seconds since ``rank``'s state was received (the hub's clock), infinite if never; without
        a hub (a dump file), its ``published`` against ``taken``."""
        if rank in self.ages:
            return max(0.0, self.ages[rank])
        state = self.states.get(rank)
        if state is None or state.published <= 0:
            return math.inf
        return max(0.0, self.taken - state.published)

    def since(self, rank: int, at: float) -> float:
        """Seconds from ``at`` (``rank``'s clock) to ``taken``: its clock to its state, then the
        hub's."""
        state = self.states.get(rank)
        if rank in self.ages and state is not None:
            return max(0.0, state.published - at + self.ages[rank])
        return max(0.0, self.taken - at)

    def to_dict(self) -> dict[str, Any]:
        return {"world_size": self.world_size, "taken": self.taken,
                "states": {str(r): (s.to_dict() if s is not None else None)
                           for r, s in sorted(self.states.items())},
                "gone": {str(r): why for r, why in self.gone.items()},  # in the order they left
                "probes": [p.to_dict() for p in self.probes],
                "ages": {str(r): age for r, age in sorted(self.ages.items())}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Snapshot:
        states = {int(r): (RankState.from_dict(s) if s is not None else None)
                  for r, s in dict(data.get("states", {})).items()}
        return cls(world_size=int(data["world_size"]), taken=float(data.get("taken", 0.0)),
                   states=states,
                   gone={int(r): str(w) for r, w in dict(data.get("gone", {})).items()},
                   probes=tuple(LinkProbe.from_dict(p) for p in data.get("probes", ())),
                   ages={int(r): float(a) for r, a in dict(data.get("ages", {})).items()})

    def around(self, diagnosis: Diagnosis, limit: int = AROUND_LIMIT) -> Snapshot:
        """What a verdict needs to blame a node (``launch.blame``): the ranks it names, the first
        ``limit`` that left, the one furthest on. Bounded: every rank gets it."""
        first = [r for r, why in self.gone.items() if not victim(why)][:limit]
        ahead = max((s for s in self.states.values() if s is not None),
                    key=lambda s: s.step, default=None)
        keep = {*diagnosis.ranks[:limit], *first, *([ahead.rank] if ahead else [])}
        return Snapshot(self.world_size, self.taken,
                        {r: self.states[r] for r in sorted(keep) if r in self.states},
                        {r: why for r, why in self.gone.items() if r in keep},
                        ages={r: a for r, a in self.ages.items() if r in keep})


_LISTS = ("ranks", "hosts", "evidence", "signals", "contradicts", "witnesses")


@dataclass(frozen=True)
class Diagnosis:
    """The named cause: what, where (ranks and hosts), the evidence, and the fix."""

    kind: str                      # one of KINDS, or "ok" / "stalled" when nothing matched,
                                   # or "working" (a warning: watchdog.working_warning)
    summary: str                   # one line: "rank 3 (node3) stopped in 'data' for 42 s"
    ranks: tuple[int, ...] = ()
    hosts: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()
    hint: str = ""
    #: how we know (``watch.signals``): the signals that agree, and what would contradict it
    signals: tuple[str, ...] = ()
    contradicts: tuple[str, ...] = ()
    #: what was found within ``kind`` (``LINK_DOWN``, ...); ``witnesses`` showed it
    sub_kind: str = ""
    witnesses: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = flat_fields(self)
        for key in _LISTS:
            out[key] = list(getattr(self, key))
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Diagnosis:
        values = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        for key in _LISTS:
            values[key] = tuple(values.get(key, ()))
        if "sub_kind" not in values and values.get("kind") == "network":
            # written before verdicts carried it (an older report.json): its summary's label,
            # the one place a summary's wording is read
            said = str(values.get("summary", ""))
            values["sub_kind"] = next((sub for sub, label in SUB_LABELS.items()
                                       if said.startswith(label)), "")
        return cls(**values)
