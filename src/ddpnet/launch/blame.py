"""Which node a watch verdict blames, if any (pure: the hub's ``report.json`` -> Blame).

A job may take a node out only when the verdict names one node and the cause is that node's:
its link is down or it answers on no port, its firewall drops the job's connections, a rank on
it died or froze. A collective mismatch or desync is the program's bug (it follows the job to
any node), a straggler or a rank busy in compute names no fault, and a verdict whose ranks sit
on two or more hosts cannot tell which end is at fault: those stop, with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ddpnet.watch.state import (
    CUT_OFF,
    FIREWALL,
    LINK_DOWN,
    MTU,
    SLOW_LINK,
    Diagnosis,
    Snapshot,
    finished,
    victim,
)

#: slurmdbd keeps a node's reason in a TINYTEXT column (255 bytes); slurmctld takes more but
#: the accounting record (sacctmgr show event) would lose the end
REASON_MAX = 255
#: every reason ddpnet sets starts with this: a node drained by someone else is never touched
REASON_PREFIX = "ddpnet: "

#: the network verdicts that are one node's fault (``Diagnosis.sub_kind``)
_NODE_NETWORK = frozenset({LINK_DOWN, FIREWALL, CUT_OFF, MTU, SLOW_LINK})
#: the network verdicts that say the node answers on nothing (SLURM cannot reach it either)
_UNREACHABLE = frozenset({LINK_DOWN, CUT_OFF})
#: verdicts that are the program's, not a node's
_CODE_KINDS = ("collective-mismatch", "desync")


@dataclass(frozen=True)
class Blame:
    """``host``: the node to take out ("" when none), with the one-line ``reason`` for SLURM;
    else ``why`` says why no node is blamed (the job stops)."""

    kind: str
    summary: str
    host: str = ""
    reason: str = ""
    why: str = ""
    #: the highest step any rank had begun when the verdict was named (-1 unknown)
    step: int = -1
    #: the node answers on no port (its link is down): SLURM cannot end the job's part there
    unreachable: bool = False

    @property
    def blames(self) -> bool:
        return bool(self.host)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "summary": self.summary, "host": self.host,
                "reason": self.reason, "why": self.why, "step": self.step,
                "unreachable": self.unreachable}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Blame:
        return cls(str(data.get("kind", "")), str(data.get("summary", "")),
                   str(data.get("host", "")), str(data.get("reason", "")),
                   str(data.get("why", "")), int(data.get("step", -1)),
                   bool(data.get("unreachable", False)))


def blame(report: Mapping[str, Any]) -> Blame:
    """The node ``report`` (the hub's report.json as a dict) blames, or why none. A report
    that is not one (no diagnosis) blames nothing."""
    try:
        diagnosis = Diagnosis.from_dict(report["diagnosis"])
        snapshot = Snapshot.from_dict(report.get("snapshot") or {"world_size": 0})
    except (KeyError, TypeError, ValueError) as exc:
        return Blame("unreadable", "", why=f"the watch report is not one ({exc!r} missing or "
                                          "malformed): nothing to blame")
    step = max((s.step for s in snapshot.states.values() if s is not None), default=-1)
    hosts, why = _suspects(diagnosis, snapshot)
    if why:
        return Blame(diagnosis.kind, diagnosis.summary, why=why, step=step)
    if len(hosts) != 1:
        shown = ", ".join(hosts) if hosts else "none known"
        return Blame(diagnosis.kind, diagnosis.summary, step=step,
                     why=f"the verdict names ranks on {len(hosts)} hosts ({shown}): which one "
                         "is at fault is unknown, so none is taken out")
    unreachable = diagnosis.kind == "network" and diagnosis.sub_kind in _UNREACHABLE
    return Blame(diagnosis.kind, diagnosis.summary, hosts[0], drain_reason(diagnosis), step=step,
                 unreachable=unreachable)


def _suspects(diagnosis: Diagnosis, snapshot: Snapshot) -> tuple[list[str], str]:
    """The hosts the verdict's cause lives on, or why it is none of a node's."""
    kind = diagnosis.kind
    if kind in _CODE_KINDS:
        return [], (f"a {kind} is the program's bug (the ranks called different collectives): "
                    "it would follow the job to any node; fix the code, no node is drained")
    if kind == "network":
        if diagnosis.sub_kind not in _NODE_NETWORK:
            return [], ("the network verdict names no node (the links were not probed): "
                        "nothing to take out")
        return _known(diagnosis.hosts), ""
    if kind == "rank-gone":
        return _gone_hosts(snapshot, diagnosis)
    if kind == "rank-not-arriving":
        late = [snapshot.states.get(r) for r in diagnosis.ranks]
        if any(s is not None and s.phase == "data" for s in late):
            return [], ("a rank waits for its data loader: storage or the loader, not its "
                        "node; nothing is drained")
        return _known(diagnosis.hosts), ""
    return [], (f"a {kind or 'nameless'} verdict names no failed node (no hang a node "
                "caused): nothing to take out")


def _gone_hosts(snapshot: Snapshot, diagnosis: Diagnosis) -> tuple[list[str], str]:
    """The hosts of the ranks that left first (not those a peer's failure stopped); a rank
    that raised an error is the program's, not its node's."""
    first = {r: why for r, why in snapshot.gone.items() if not victim(why) and not finished(why)}
    if not first:  # a report without the gone map: the verdict's own first rank
        first = {r: "" for r in diagnosis.ranks[:1]}
    errors = [f"rank {r}: {why}" for r, why in first.items() if why.startswith("exited with")]
    if errors:
        return [], (f"{errors[0]}: the program raised (a bug or its input, not the node); "
                    "read that rank's log; nothing is drained")
    hosts = [s.host if s is not None and s.host else "?"
             for s in (snapshot.states.get(r) for r in first)]
    if not snapshot.states and diagnosis.hosts:
        hosts = list(diagnosis.hosts[:1])
    return _known(tuple(hosts)), ""


def _known(hosts: tuple[str, ...]) -> list[str]:
    """The distinct hosts, in order; an unknown one ("?") makes the set unknowable."""
    out = list(dict.fromkeys(hosts))
    return [] if "?" in out or "" in out else out


def drain_reason(diagnosis: Diagnosis, limit: int = REASON_MAX) -> str:
    """``ddpnet: <kind>: <summary>; <first evidence>``, one line, at most ``limit`` bytes: the
    evidence only when it fits whole, the summary cut only between words (an address or a
    host is whole or absent, never cut)."""
    head = f"{REASON_PREFIX}{diagnosis.kind}: {diagnosis.summary}"
    return fit_reason(head, diagnosis.evidence[0] if diagnosis.evidence else "", limit)


def fit_reason(head: str, tail: str, limit: int = REASON_MAX, joiner: str = "; ") -> str:
    """``head`` + ``joiner`` + ``tail`` on one line of at most ``limit`` bytes (SLURM's
    reason column): ``tail`` only when it fits whole, else ``head`` cut only between words
    (an address or a host is whole or absent)."""
    head = " ".join(head.split())
    tail = " ".join(tail.split())
    if tail and len(f"{head}{joiner}{tail}".encode()) <= limit:
        return f"{head}{joiner}{tail}"
    out = ""
    for word in head.split():
        candidate = f"{out} {word}" if out else word
        if len(candidate.encode()) > limit:
            break
        out = candidate
    return out.rstrip(",;:")


def ddpnet_reason(reason: str) -> bool:
    """Whether a node's reason is ddpnet's own (a drain ddpnet may lift)."""
    return reason.startswith(REASON_PREFIX)
