"""What every stage of one rank works with: the config, the selected interface, the store,
the mesh listener, the facts being gathered; and on rank 0 the findings the report is made
of."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ddpnet.check.causes import Cause, host_label
from ddpnet.check.latency import Latency, Window
from ddpnet.check.mesh import Listener
from ddpnet.check.options import CheckOptions
from ddpnet.check.registration import Registration
from ddpnet.check.report import CheckReport
from ddpnet.check.store import Store
from ddpnet.config import DistConfig
from ddpnet.net.select import Selection

Progress = Callable[[str], None]
BenchFn = Callable[[float], dict[str, Any]]


@dataclass(frozen=True)
class RankOutcome:
    """What this rank prints: rank 0 the report, others one line."""

    rank: int
    host: str
    ok: bool
    line: str
    report: CheckReport | None = None


@dataclass
class RankContext:
    cfg: DistConfig
    opts: CheckOptions
    sel: Selection
    store: Store
    listener: Listener
    facts: Future[dict[str, Any]]
    bench: BenchFn
    host: str
    started: float
    progress: Progress = lambda _m: None
    uid: str = field(default_factory=lambda: uuid.uuid4().hex)
    timings: dict[str, float] = field(default_factory=dict)
    #: ranks > 0: what crossed to rank 0's echo (``PeerMtu.to_dict()``), None if not probed
    to_rank0: dict[str, Any] | None = None
    #: the address the mesh probes leave from (None: the kernel's choice, as gloo's own);
    #: simulated ranks sharing one host each give their own (benchmarks/scale_sim.py)
    probe_from: str | None = None
    #: rank 0: causes known before the run (``--local``'s shell variables), in its verdict
    given: tuple[Cause, ...] = ()

    @property
    def rank(self) -> int:
        return self.cfg.rank

    @property
    def world(self) -> int:
        return self.cfg.world_size

    @property
    def address(self) -> str:
        return str(self.sel.address)

    @property
    def who(self) -> str:
        """``rank R host (address)``: how this rank names itself in its one line."""
        return f"rank {self.rank} {host_label(self.host, self.address)}"

    @property
    def budget(self) -> float:
        """How long a rank > 0 waits for rank 0's next decision."""
        return self.opts.join_timeout + self.opts.stage_timeout

    def registration(self) -> Registration:
        cfg = self.cfg
        return Registration(
            rank=cfg.rank, world_size=cfg.world_size, master_port=cfg.master_port,
            host=self.host, address=self.address, interface=str(self.sel.interface),
            pid=os.getpid(), uid=self.uid, launcher=cfg.launcher)

    def took(self, name: str, since: float) -> float:
        """Record the seconds a stage took since ``since`` (a monotonic time)."""
        self.timings[name] = time.monotonic() - since
        return self.timings[name]


@dataclass
class Findings:
    """Rank 0's report in the making: causes, per-stage status, nodes, the matrices."""

    world: int
    master: str
    roster: list[Registration] = field(default_factory=list)
    causes: list[Cause] = field(default_factory=list)
    stages: dict[str, str] = field(default_factory=dict)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    #: the mesh's round trips, ``(prober, peer) -> ms``, what they name (check.latency) and
    #: every host's TCP windows they are judged against
    rtt: dict[tuple[int, int], float] = field(default_factory=dict)
    latency: Latency | None = None
    windows: dict[int, Window] = field(default_factory=dict)
    #: measured rates of the links that cross a NIC, ``(from, to) -> Gb/s``: the matrix's,
    #: else the sampled mesh's ring streams
    rates: dict[tuple[int, int], float] = field(default_factory=dict)

    #: rank -> label, for the roster it was built from (its identity and length)
    _labels: tuple[int, int, dict[int, str]] | None = field(default=None, repr=False,
                                                             compare=False)

    @property
    def ranks(self) -> list[int]:
        return [r.rank for r in self.roster]

    @property
    def labels(self) -> list[str]:
        by_rank = self._by_rank()
        return [by_rank[r.rank] for r in self.roster]

    def label_of(self, rank: int) -> str:
        """O(1): a lookup per rank searched the roster (4,096 ranks: ~40 s of rank 0's
        CPU in the facts and MTU stages)."""
        return self._by_rank()[rank]

    def _by_rank(self) -> dict[int, str]:
        key = (id(self.roster), len(self.roster))
        if self._labels is None or self._labels[:2] != key:
            self._labels = (*key, {r.rank: r.label for r in self.roster})
        return self._labels[2]

    def timeout_cause(self, stage: str, lost: list[int]) -> Cause:
        by_rank = self._by_rank()
        return Cause(
            id="stage-timeout", stage=stage, ranks=tuple(lost),
            hosts=tuple(by_rank.get(r, "?") for r in lost),
            detail=f"rank(s) {', '.join(map(str, lost))} did not finish the {stage} stage "
                   f"in time",
            fix="look at those ranks' own output; run `ddpnet doctor` there",
            evidence=(f"no result from rank(s) {', '.join(map(str, lost))} in the {stage} "
                      "stage before its deadline (--timeout)",),
            confidence="low",  # a hung, crashed or starved rank all look the same from here
            see_for_yourself="ddpnet doctor",
        )

    def report(self, timings: dict[str, float]) -> CheckReport:
        return CheckReport(world_size=self.world, master=self.master,
                           causes=tuple(self.causes), nodes=tuple(self.nodes),
                           timings=dict(timings), stages=dict(self.stages), **self.extra)


T = TypeVar("T")


def in_thread(work: Callable[[], T]) -> Future[T]:
    """``work()`` in a daemon thread; its result (or exception) in the future (the facts
    gathered while a rank joins, the lookups rank 0 times while it gathers)."""
    future: Future[T] = Future()

    def collect() -> None:
        try:
            future.set_result(work())
        except BaseException as exc:  # handed to whoever reads the future
            future.set_exception(exc)

    threading.Thread(target=collect, name="ddpnet-check-work", daemon=True).start()
    return future
