"""The SLURM controller calls a job makes about itself and its nodes (edge): requeue, drain,
resume, exclude, and a node's state. Each is one bounded ``scontrol``/``sinfo`` run that
says what happened (never raises for a tool that is absent, refuses or hangs)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ddpnet.subproc import CommandOutput, run_tool

#: one short RPC to slurmctld; bounded like every tool we run
TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Answer:
    """What one call did: ``ok``, and the tool's one-line answer or why it did not run."""

    ok: bool
    detail: str


def _answer(out: CommandOutput, done: str) -> Answer:
    lines = (out.stderr or out.stdout).strip().splitlines()
    detail = lines[-1] if lines else ""
    if out.returncode == 0:
        return Answer(True, detail or done)
    return Answer(False, detail or f"scontrol exited {out.returncode}")


def scontrol(*args: str, done: str = "") -> Answer:
    """``scontrol ARGS``; ``done``: what to say when it succeeds silently."""
    return _answer(run_tool(["scontrol", *args], TIMEOUT_S), done or f"scontrol {' '.join(args)}")


def requeue(job_id: str) -> Answer:
    """``scontrol requeue JOB``: back to pending, its script starts again from the top once
    SLURM ended this run (SIGTERM, SIGKILL after KillWait)."""
    return scontrol("requeue", job_id, done=f"job {job_id} requeued")


def drain(node: str, reason: str) -> Answer:
    """``scontrol update NodeName=N State=DRAIN Reason=...``: no new job starts on the node;
    an operator (or ddpnet once the node passes its checks) resumes it. Needs SLURM operator
    rights (root, SlurmUser, or AdminLevel=Operator)."""
    return scontrol("update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}")


def down(node: str, reason: str) -> Answer:
    """``State=DOWN``: SLURM stops waiting for the node to end what a job ran there (an
    unreachable node holds a requeued job in COMPLETING until SlurmdTimeout). A drain set
    before stays: the node comes back drained, not into service."""
    return scontrol("update", f"NodeName={node}", "State=DOWN", f"Reason={reason}")


def resume(node: str) -> Answer:
    """``State=UNDRAIN``: lift the drain only. ``State=RESUME`` would also bring a DOWN (or
    FAIL) node back into service, clearing a state someone else set (scontrol(1))."""
    return scontrol("update", f"NodeName={node}", "State=UNDRAIN")


def requeue_excluding(job_id: str, nodes: Sequence[str]) -> tuple[Answer, ...]:
    """Requeue held, exclude ``nodes`` (only a pending job's ExcNodeList can change), release:
    what a job without operator rights can do. The caller must survive the SIGTERM the
    requeue sends its own job for the two calls after it."""
    out = [scontrol("requeuehold", job_id)]
    if out[0].ok:
        out.append(scontrol("update", f"JobId={job_id}", f"ExcNodeList={','.join(nodes)}"))
        out.append(scontrol("release", job_id))
    return tuple(out)


def node_fields(node: str) -> dict[str, str]:
    """``scontrol show node N -o`` as fields (``State``, ``Reason``, ...); empty when the node
    is unknown or the controller does not answer. The Reason holds spaces: it runs to the
    `` [user@time]`` SLURM appends."""
    out = run_tool(["scontrol", "show", "node", node, "-o"], TIMEOUT_S)
    if out.returncode != 0:
        return {}
    return parse_node_line(out.stdout)


def all_nodes() -> tuple[dict[str, str], ...]:
    """Every node's fields (``scontrol show nodes -o``); empty when the controller does not
    answer."""
    out = run_tool(["scontrol", "show", "nodes", "-o"], TIMEOUT_S)
    if out.returncode != 0:
        return ()
    return tuple(parse_node_line(line) for line in out.stdout.splitlines() if line.strip())


def set_extra(node: str, extra: str) -> Answer:
    """``scontrol update NodeName=N Extra=...``: a node's free-form field (SLURM >= 22.05)."""
    return scontrol("update", f"NodeName={node}", f"Extra={extra}")


#: the fields ``scontrol show node -o`` writes last, whose values hold spaces
_SPACED = re.compile(r" (Reason|Comment|Extra)=")
#: what SLURM appends to a reason: `` [user@time]``
_STAMP = re.compile(r" \[[^\]]*@[^\]]*\]$")


def parse_node_line(line: str) -> dict[str, str]:
    """One ``scontrol show node -o`` line as fields (pure). Reason, Comment and Extra come
    last and may hold spaces: each runs to the next of them; Reason's ``[user@time]``
    suffix is dropped."""
    parts = _SPACED.split(line.strip())
    fields: dict[str, str] = {}
    for item in parts[0].split():
        key, eq, value = item.partition("=")
        if eq:
            fields[key] = value
    for key, value in zip(parts[1::2], parts[2::2], strict=True):
        fields[key] = _STAMP.sub("", value) if key == "Reason" else value
    return fields


def usable_nodes(partition: str) -> tuple[str, ...]:
    """The partition's nodes a job may start on (not down, drained, draining, failing or
    not responding); empty when sinfo does not answer."""
    args = ["sinfo", "-h", "-N", "-o", "%N %t"] + (["-p", partition] if partition else [])
    out = run_tool(args, TIMEOUT_S)
    if out.returncode != 0:
        return ()
    return parse_sinfo(out.stdout)


_BAD = ("down", "drain", "drng", "drained", "fail", "failg", "maint", "npc", "unk", "boot",
        "powered_down", "pow_dn", "inval", "resv")


def parse_sinfo(text: str) -> tuple[str, ...]:
    """``%N %t`` lines -> the usable nodes, in order (pure); a ``*`` suffix (not
    responding) or ``~``/``#``/``!``/``%`` (power saving) is not usable."""
    out: list[str] = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        node, state = parts
        if state[-1:] in "*~#!%" or state.rstrip("+-$@^") in _BAD:
            continue
        out.append(node)
    return tuple(dict.fromkeys(out))
