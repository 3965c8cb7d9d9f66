"""A rank that judges itself (edge): silent hub and no progress for its threshold
(``threshold.self_judged``), it checks itself (``watch.cutoff``), writes its dump and exits 4, since
no verdict can reach it."""

from __future__ import annotations

import math
import threading
import time

from ddpnet.exitcodes import ExitCode
from ddpnet.watch import cutoff, gaps
from ddpnet.watch.answers import Answers
from ddpnet.watch.dump import write_state
from ddpnet.watch.progress import progressed
from ddpnet.watch.state import RankState
from ddpnet.watch.threshold import Threshold, learned, self_judged


class SelfJudge(Answers):
    """The self-judging part of a :class:`~ddpnet.watch.heartbeat.Beacon`."""

    #: what this rank judges itself by when the hub goes quiet
    judge_by: Threshold
    #: this rank's state when it last moved (``watch.progress``), and when (monotonic)
    moved: RankState | None = None
    progressed: float
    judged = False
    #: a hub that accepts connections but is slow to answer is checked again then
    recheck_at = 0.0
    #: set when this rank died of a peer's failure and waits for the verdict
    dying: threading.Event

    def judge_self(self, state: RankState) -> None:
        """Heard nothing and made no progress for the threshold: its own verdict, unless patient."""
        own = learned({self.ident.rank: gaps.Summary.from_dict(state.extra.get(gaps.KEY))})
        self.judge_by = self_judged(self.threshold, self.base, own, state)
        now = time.monotonic()
        if progressed(self.moved, state):
            self.moved, self.progressed = state, now
        if self.judged or self.stopped.is_set() or self.obeyed.is_set() or \
                now < self.recheck_at:
            return
        early = not self.judge_due(now)
        if early and (self.dying.is_set() or not cutoff.early(
                now, self.heard, self.progressed, self.judge_by.seconds)):
            return
        facts = self.gather(state, now)
        sock = self.sock
        if sock is not None:
            self.listen(0.0, sock)  # a verdict that came meanwhile wins
        if self.obeyed.is_set():
            return
        if early and not cutoff.conclusive(facts):  # the threshold decides
            self.recheck_at = time.monotonic() + cutoff.EARLY_S / 2
            return
        if not early and not self.judge_due(time.monotonic()):
            return
        if cutoff.patient(facts, self.judge_by.seconds):
            self.recheck_at = time.monotonic() + self.judge_by.seconds
            return
        self.leave(facts)

    def leave(self, facts: cutoff.Facts) -> None:
        """This rank's own verdict: its dump, the verdict on stderr, exit 4."""
        self.judged = True
        diagnosis = cutoff.verdict(facts)
        path = write_state(self.directory, self.state(), f"{diagnosis.kind}: "
                           f"{diagnosis.summary}", verdict=diagnosis)
        lines = "".join(f"  - {line}\n" for line in diagnosis.evidence)
        self.exit_saying(int(ExitCode.WATCHDOG), diagnosis, path,
                         f"{lines}  hint: {diagnosis.hint}\n")

    def gather(self, state: RankState, now: float) -> cutoff.Facts:
        """What this rank finds about itself (``cutoff.gather``: bounded connects)."""
        judged = self.judge_by
        return cutoff.gather(state, self.hub, self.peers, heard_ago=now - self.heard,
                             heard_at=self.heard_at, stalled_for=now - self.progressed,
                             judged_by=f"{judged.seconds:g} s ({judged.source}: "
                                       f"{judged.reason})")

    def judge_due(self, now: float) -> bool:
        """Whether to judge itself now. A rank dying of a peer's failure makes no progress any more:
        the hub's silence alone decides, at once when the connection is gone."""
        if self.dying.is_set():
            return self.sock is None or cutoff.due(now, self.heard, -math.inf,
                                                   self.judge_by.seconds)
        return cutoff.due(now, self.heard, self.progressed, self.judge_by.seconds)
