"""The verdict's gate inside torchrun's agent (edge), for ``ddpnet launch --max-restarts``.

:func:`install` wraps ``LocalElasticAgent._monitor_workers`` (torchrun calls it every
``--monitor-interval``). When the node's worker group failed, the gate reads the verdict its
ranks obeyed (their dumps in ``$DDPNET_WATCH_DIR``, written since this attempt began) and
:func:`ddpnet.launch.elastic.choose` decides:

- **restart**: another node is blamed: its name goes into the rendezvous store
  (``ddpnet/left/<host>``) and torchrun restarts the group; with an elastic ``--nnodes
  MIN:MAX`` the next round closes without it, after a last call of
  :data:`LAST_CALL_AFTER_LEAVE_S` (torchrun's is 30 s: it waits for a node that left);
- **leave**: this node is blamed: its workers are killed, it leaves the rendezvous without
  closing it, and ``ddpnet launch`` exits 4 with the verdict (:class:`Leave`);
- **stop**: no node to blame, a second failure, too few nodes: no restart here (torchrun then
  closes the rendezvous, and every node stops).

A node whose rank froze (or was killed) learns it is blamed from the store: before torchrun
restarts its group (``_restart_workers``: the others wait in a new round), every
:data:`CHECK_EVERY_S` while its group looks healthy, and for up to :data:`GRACE_S` after its
group failed with no verdict of its own. Each action is printed and appended to
``recovery-<host>.json`` in the watch directory (``launch.recovery``'s record).
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import sys
import time
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from ddpnet.launch.blame import Blame, blame
from ddpnet.launch.elastic import Gate, choose
from ddpnet.launch.recovery import Event, Record
from ddpnet.watch.dump import heard_verdicts

#: the store key naming a node that must stay out (its value: the Blame as JSON)
LEFT_KEY = "ddpnet/left/"
#: how often a node whose group looks healthy asks whether the others blamed it
CHECK_EVERY_S = 2.0
#: how long a node whose group failed with no verdict of its own waits to hear one
GRACE_S = 10.0
#: the last call of the rounds after a node was left out (torchrun's default 30 s; a shorter
#: one, set in torchrun's ``--rdzv-conf``, is kept): once MIN nodes are back, the round waits
#: this long for the rest, which obeyed the same verdict, each within GRACE_S of its group
#: failing; the blamed node never comes
LAST_CALL_AFTER_LEAVE_S = GRACE_S + 2.0
#: what the action's record is called in the watch directory (one per node: it may be shared)
RECORD_TEMPLATE = "recovery-{host}.json"

_FAILED = ("FAILED", "UNHEALTHY")


def _leave_exception() -> type[BaseException]:
    from torch.distributed.elastic.multiprocessing.api import SignalException

    class Leave(SignalException):
        """This node leaves: torchrun's launcher does not close the rendezvous on a
        SignalException (the others go on); :func:`ddpnet.launch.torchrun_main.main` tells
        it from a real signal."""

        def __init__(self, gate: Gate) -> None:
            super().__init__(gate.line, signal.SIGTERM)
            self.gate = gate

    return Leave


@dataclass
class Watching:
    """One agent's gate: where its ranks' dumps are, when this attempt began, who left."""

    directory: Path
    #: this node runs the rendezvous store (leaving would end the job)
    store_here: bool = False
    me: str = field(default_factory=socket.gethostname)
    since: float = field(default_factory=time.time)
    pids: frozenset[int] = frozenset()
    checked: float = 0.0
    left: dict[str, Blame] = field(default_factory=dict)
    record: Record = field(default_factory=lambda: Record(job="launch"))

    def after(self, agent: Any, group: Any, result: Any) -> Any:
        """torchrun's ``_monitor_workers`` result, after the gate acted on it."""
        pids = frozenset(int(w.id) for w in group.workers if w.id is not None)
        if pids != self.pids:  # a new attempt: older dumps are another attempt's
            self.pids, self.since = pids, time.time() - 1.0
        state = result.state.name
        if state in _FAILED:
            return self.failed(agent, group, result)
        if state == "HEALTHY" and time.monotonic() - self.checked >= CHECK_EVERY_S:
            self.before_restart(agent, group)
        return result

    def before_restart(self, agent: Any, group: Any) -> None:
        """Leave if the others blamed this node: before torchrun restarts its group (it does
        when other nodes wait for a new round, which they join after telling the store),
        and every CHECK_EVERY_S while the group looks healthy (its rank may be frozen)."""
        self.checked = time.monotonic()
        told = _told(group, self.me)
        if told is not None:
            self.act(agent, group, Gate("leave", told, _told_line(self.me, told)))

    def failed(self, agent: Any, group: Any, result: Any) -> Any:
        ranks = [int(w.global_rank) for w in group.workers]
        verdict = self.heard(ranks, group)
        gate = choose(verdict, self.me, self.left, int(group.group_world_size),
                      _min_nodes(group), self.store_here)
        if gate.action == "restart" and gate.verdict is not None:
            _tell(group, gate.verdict)
            self.left[gate.verdict.host] = gate.verdict
            _shorten_last_call(group)
        elif gate.action == "stop":
            agent._remaining_restarts = 0  # torchrun stops the group and closes the round
        self.act(agent, group, gate)
        return result

    def heard(self, ranks: list[int], group: Any) -> Blame | None:
        """The verdict this node's ranks obeyed, else (waiting up to GRACE_S) what the other
        nodes said of this one; None when neither came."""
        deadline = time.monotonic() + GRACE_S
        while True:
            reports = heard_verdicts(self.directory, ranks, self.since)
            if reports:
                return blame(reports[0])
            told = _told(group, self.me)
            if told is not None or time.monotonic() >= deadline:
                return told
            time.sleep(0.2)

    def act(self, agent: Any, group: Any, gate: Gate) -> None:
        """Say it, record it; a node that leaves kills its workers and raises Leave."""
        if gate.action == "torch" or gate.verdict is None:
            return
        sys.stderr.write(gate.line + "\n")
        sys.stderr.flush()
        self.write(gate)
        if gate.action != "leave":
            return
        with contextlib.suppress(Exception):  # a frozen worker ignores SIGTERM: kill it
            agent._shutdown(signal.SIGKILL, 5)
        _exit_round(group)
        raise _leave_exception()(gate)

    def write(self, gate: Gate) -> None:
        verdict = gate.verdict
        assert verdict is not None
        now = time.time()
        what = {"restart": "exclude", "leave": "exclude", "stop": "stop"}[gate.action]
        events = [Event("verdict", 0, now, verdict.host, verdict=verdict),
                  Event(what, 0, now, verdict.host if what == "exclude" else "",
                        gate.line, step=verdict.step)]
        self.record = self.record.add(*events)
        path = self.directory / RECORD_TEMPLATE.format(host=self.me)
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(self.record.to_dict(), indent=1))


def _told_line(me: str, told: Blame) -> str:
    return (f"ddpnet: launch on {me}: {told.kind}: {told.summary}: the other nodes blame "
            "this one: it leaves the job; they go on without it")


def _store(group: Any) -> Any:
    """The rendezvous's own store (c10d: the TCPStore every agent shares), or None."""
    return getattr(group.spec.rdzv_handler, "_store", None)


def _tell(group: Any, verdict: Blame) -> None:
    store = _store(group)
    if store is not None:
        with contextlib.suppress(Exception):  # the store's node may be the one gone
            store.set(LEFT_KEY + verdict.host, json.dumps(verdict.to_dict()))


def _told(group: Any, me: str) -> Blame | None:
    """What the others said of this node through the store, or None."""
    store = _store(group)
    if store is None:
        return None
    keys = list(dict.fromkeys([LEFT_KEY + me, LEFT_KEY + me.split(".")[0]]))
    for key in keys:
        with contextlib.suppress(Exception):
            if store.check([key]):
                data = json.loads(store.get(key))
                return replace(Blame.from_dict(data), host=me)
    return None


def _shorten_last_call(group: Any) -> None:
    """Wait LAST_CALL_AFTER_LEAVE_S, not torchrun's 30 s, for the nodes above MIN in the
    rounds to come (the node that reaches MIN sets the round's deadline from its own
    setting: every node that restarts sets it alike); best effort on torch's own type."""
    timeout = getattr(_settings(group), "timeout", None)
    shorter = timedelta(seconds=LAST_CALL_AFTER_LEAVE_S)
    with contextlib.suppress(Exception):
        if timeout is not None and timeout.last_call > shorter:
            timeout._last_call = shorter


def _settings(group: Any) -> Any:
    """The rendezvous handler's settings (torch's RendezvousSettings), or None."""
    return getattr(group.spec.rdzv_handler, "settings", None)


def _min_nodes(group: Any) -> int:
    return int(getattr(_settings(group), "min_nodes", group.group_world_size))


def holds_store(endpoint: str) -> bool:
    """Whether this node runs the rendezvous's TCPStore: torchrun's c10d backend starts it
    where the ``--rdzv-endpoint`` host is one of this machine's names or addresses."""
    from torch.distributed.elastic.rendezvous.utils import (
        _matches_machine_hostname,
        parse_rendezvous_endpoint,
    )

    if not endpoint:
        return False
    host, _port = parse_rendezvous_endpoint(endpoint, default_port=29400)
    with contextlib.suppress(Exception):  # a name that does not resolve: not this node
        return bool(_matches_machine_hostname(host))
    return False


def _exit_round(group: Any) -> None:
    """Leave the rendezvous's participants now (else the others wait for this node's
    keep-alive to lapse, 15 s more); torchrun's own exit step, best effort."""
    handler = group.spec.rdzv_handler
    with contextlib.suppress(Exception):
        from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _RendezvousExitOp

        handler._stop_heartbeats()
        handler._op_executor.run(_RendezvousExitOp(), time.monotonic() + 10.0)


def install(directory: Path, endpoint: str) -> Watching:
    """Wrap torchrun's agent monitor with the gate (once per process), for a job whose
    rendezvous is at ``endpoint``; returns the gate's state."""
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    watching = Watching(directory, holds_store(endpoint))
    original = LocalElasticAgent._monitor_workers

    restart = LocalElasticAgent._restart_workers

    def monitored(self: Any, worker_group: Any) -> Any:
        return watching.after(self, worker_group, original(self, worker_group))

    def restarted(self: Any, worker_group: Any) -> None:
        watching.before_restart(self, worker_group)
        restart(self, worker_group)

    LocalElasticAgent._monitor_workers = monitored  # type: ignore[method-assign]
    LocalElasticAgent._restart_workers = restarted  # type: ignore[method-assign]
    return watching

