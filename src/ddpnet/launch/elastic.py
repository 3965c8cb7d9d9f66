"""What one node's torchrun agent does about a watch verdict under ``ddpnet launch
--max-restarts`` (pure): restart with the others, leave the job (this node is blamed), or
stop every node (no node to blame, a second failure, too few nodes left).

torchrun restarts a failed worker group on every node, the faulty one included; with an
elastic ``--nnodes MIN:MAX`` the other nodes can go on without it, if it stays out. Each
agent reads the verdict its own ranks obeyed (their dumps, ``watch.dump.heard_verdicts``),
asks :func:`ddpnet.launch.blame.blame` which node it blames, and :func:`choose` says what to
do. The node blamed learns it from its ranks' dumps, or (a frozen or killed rank wrote none)
from the others through the rendezvous store (``launch.elastic_agent``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ddpnet.launch.blame import Blame
from ddpnet.launch.recovery import match_node

#: what an agent does: torch's own restart (no verdict known), restart without the blamed
#: node, leave (this node is blamed), stop the job
ACTIONS = ("torch", "restart", "leave", "stop")


@dataclass(frozen=True)
class Gate:
    """The action, the verdict it answers, and its one line for the log (with the fix when it
    stops)."""

    action: str
    verdict: Blame | None = None
    line: str = ""


def choose(verdict: Blame | None, me: str, left: Mapping[str, Blame], nodes: int,
           min_nodes: int, holds_store: bool) -> Gate:
    """What this node (``me``) does about ``verdict`` (None: its ranks heard none) in a job of
    ``nodes`` nodes that may shrink to ``min_nodes``; ``left`` maps each node taken out
    earlier to the verdict that blamed it; ``holds_store``: this node runs the rendezvous
    store (the job ends with it)."""
    if verdict is None:
        return Gate("torch")
    head = f"ddpnet: launch on {me}: {verdict.kind}: {verdict.summary}"
    if not verdict.blames:
        return Gate("stop", verdict, f"{head}: no restart: {verdict.why}")
    host = verdict.host
    why = _refusal(verdict, left, nodes, min_nodes)
    if why:
        return Gate("stop", verdict, f"{head}: no restart: {why}")
    if match_node(host, [me]):
        if holds_store:
            return Gate("stop", verdict, f"{head}: no restart: this node is blamed and runs "
                                         "the rendezvous store (--rdzv-endpoint), which the "
                                         "job cannot go on without; hint: put the endpoint on "
                                         "a node that runs no ranks, or fix this node")
        return Gate("leave", verdict, f"{head}: this node is blamed: it leaves the job; the "
                                      f"other {nodes - 1} go on without it")
    return Gate("restart", verdict, f"{head}: {host} is blamed: the job restarts without it "
                                    f"on {nodes - 1} node{'s' if nodes - 1 != 1 else ''}")


def _refusal(verdict: Blame, left: Mapping[str, Blame], nodes: int, min_nodes: int) -> str:
    """Why the job must stop rather than go on without the blamed node, or ""."""
    host = verdict.host
    if host in left:
        return (f"{host} is blamed again although it left the job: it did not stay out; "
                "stopping instead of looping")
    if left and verdict.step <= max(b.step for b in left.values()):
        first = next(iter(left))
        return (f"a second failure on another node ({host} at step {verdict.step}, after "
                f"{first} at step {left[first].step}) before training got past the first: "
                "the fault is not one node's")
    if nodes - 1 < min_nodes:
        return (f"the job needs {min_nodes} node{'s' if min_nodes != 1 else ''} and "
                f"{nodes - 1} would be left without {host}; hint: launch with --nnodes "
                f"{max(1, nodes - 1)}:{nodes} to let the job go on without a node")
    return ""
