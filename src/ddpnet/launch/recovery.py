"""A job's recovery record and what to do about a new verdict (pure).

The record (``recovery.json`` in the job's directory) lists every action in order: a verdict
seen, a node drained or excluded, the job requeued, training resumed at a step, a stop and
why. :func:`decide` reads it with the new verdict's :class:`~ddpnet.launch.blame.Blame` and
returns the one thing to do: take the node out and restart, or stop with every verdict so
far. Never a loop (a budget; a node blamed again although taken out), never a wrong target (a
second failure on another node before training got past the first: the fault is not one
node's; a host that is not one of the job's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ddpnet.launch.blame import Blame

#: restarts a job may make by itself (``ddpnet sbatch --max-recoveries``)
DEFAULT_MAX_RECOVERIES = 2
#: more is a loop by another name
MAX_RECOVERIES = 100
RECORD_NAME = "recovery.json"

#: event kinds, in the order they happen
EVENTS = ("verdict", "drain", "exclude", "requeue", "down", "restart", "resumed", "stop")
#: what a restart is: the job requeued, or (``--spare-nodes``) its step started again inside
#: the allocation without the blamed node
RESTARTS = ("requeue", "restart")


@dataclass(frozen=True)
class Event:
    """One action: ``what`` (one of EVENTS), its run (SLURM_RESTART_COUNT), when, the node,
    one line of detail, and the verdict it answers (``verdict`` events)."""

    what: str
    run: int
    at: float
    node: str = ""
    detail: str = ""
    verdict: Blame | None = None
    step: int = -1

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"what": self.what, "run": self.run, "at": self.at,
                               "node": self.node, "detail": self.detail, "step": self.step}
        if self.verdict is not None:
            out["verdict"] = self.verdict.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Event:
        verdict = data.get("verdict")
        return cls(str(data["what"]), int(data.get("run", 0)), float(data.get("at", 0.0)),
                   str(data.get("node", "")), str(data.get("detail", "")),
                   Blame.from_dict(verdict) if isinstance(verdict, Mapping) else None,
                   int(data.get("step", -1)))

    def line(self) -> str:
        """``run 0: drain n1: ddpnet: network: link down: ...`` (the history's row)."""
        node = f" {self.node}" if self.node else ""
        step = f" at step {self.step}" if self.step >= 0 else ""
        detail = self.detail
        if self.verdict is not None:
            detail = f"{self.verdict.kind}: {self.verdict.summary}"
        return f"run {self.run}: {self.what}{node}{step}: {detail}".rstrip(": ")


@dataclass(frozen=True)
class Record:
    job: str
    events: tuple[Event, ...] = ()
    max_recoveries: int = DEFAULT_MAX_RECOVERIES

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job, "max_recoveries": self.max_recoveries,
                "events": [e.to_dict() for e in self.events]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Record:
        return cls(str(data.get("job", "")),
                   tuple(Event.from_dict(e) for e in data.get("events", ())),
                   int(data.get("max_recoveries", DEFAULT_MAX_RECOVERIES)))

    def add(self, *events: Event) -> Record:
        return Record(self.job, (*self.events, *events), self.max_recoveries)

    @property
    def verdicts(self) -> tuple[Event, ...]:
        return tuple(e for e in self.events if e.what == "verdict")

    @property
    def taken_out(self) -> tuple[str, ...]:
        """The nodes drained or excluded so far, in order."""
        return tuple(dict.fromkeys(e.node for e in self.events
                                   if e.what in ("drain", "exclude") and e.node))

    @property
    def recoveries(self) -> int:
        """Restarts so far, requeues and step restarts in the allocation alike."""
        return sum(1 for e in self.events if e.what in RESTARTS)

    def acted_in(self, run: int, since: float = 0.0) -> bool:
        """Whether run ``run`` (started at ``since``) already has its verdict recorded: a
        second caller in the same run does nothing."""
        return any(e.what == "verdict" and e.run == run and e.at >= since
                   for e in self.events)


@dataclass(frozen=True)
class Decision:
    """``node`` to take out and restart without it; or stop (``node`` "") with ``why``."""

    node: str = ""
    why: str = ""
    history: tuple[str, ...] = field(default=())
    #: refused only because too few nodes are left (a requeue may still find them)
    too_few: bool = False

    @property
    def restart(self) -> bool:
        return bool(self.node)


def decide(record: Record, verdict: Blame, job_nodes: Sequence[str], pool: Sequence[str],
           needed: int) -> Decision:
    """What to do about ``verdict`` in a job on ``job_nodes`` that needs ``needed`` nodes of
    ``pool`` (the nodes it may run on that are up and not drained) (pure). ``record`` holds
    what happened before (not yet this verdict)."""
    history = tuple(e.line() for e in record.verdicts)
    if not verdict.blames:
        return Decision(why=verdict.why, history=history)
    node = match_node(verdict.host, job_nodes)
    why = _refusal(record, verdict, node, job_nodes)
    if why:
        return Decision(why=why, history=history)
    healthy = [n for n in pool if n != node and n not in record.taken_out]
    if needed > len(healthy):
        return Decision(why=f"too few healthy nodes left: the job needs {needed}, "
                            f"{len(healthy)} ({', '.join(healthy) or 'none'}) remain without "
                            f"{node}", history=history, too_few=True)
    return Decision(node=node, history=history)


def _refusal(record: Record, verdict: Blame, node: str, job_nodes: Sequence[str]) -> str:
    """Why the blamed node must not be taken out and the job restarted, or ""."""
    if not node:
        return (f"the verdict blames host {verdict.host}, which is none of this job's nodes "
                f"({', '.join(job_nodes)}): nothing is drained")
    if node in record.taken_out:
        return (f"{node} is blamed again although it was taken out before: the exclusion did "
                "not hold; stopping instead of looping")
    if record.recoveries >= record.max_recoveries:
        return (f"the restart budget is used up ({record.recoveries} of --max-recoveries "
                f"{record.max_recoveries})")
    earlier = [e.verdict for e in record.verdicts if e.verdict is not None and e.verdict.blames]
    if earlier and verdict.step <= max(v.step for v in earlier):
        last = earlier[-1]
        return (f"a second failure on another node ({node} at step {verdict.step}, after "
                f"{last.host} at step {last.step}) before training got past the first: the "
                "fault is not one node's")
    return ""


def match_node(host: str, job_nodes: Sequence[str]) -> str:
    """The job's node that ``host`` (as the ranks named themselves) is: the same name, or
    the same short name (``n1.cluster`` vs ``n1``); "" when none or more than one match."""
    if host in job_nodes:
        return host
    short = host.split(".")[0]
    found = [n for n in job_nodes if n.split(".")[0] == short]
    return found[0] if len(found) == 1 else ""


def step_nodes(allocation: Sequence[str], taken_out: Sequence[str], needed: int
               ) -> tuple[str, ...]:
    """The ``needed`` nodes of the allocation a (re)started step runs on: the first ones,
    in the allocation's order, that were not taken out (pure); empty when too few remain.
    The first is the step's node 0 (MASTER_ADDR)."""
    left = tuple(n for n in allocation if n not in taken_out)
    return left[:needed] if needed <= len(left) else ()
