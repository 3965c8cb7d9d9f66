"""The hub's decisions: each tick, whether the job stalled or lost a rank, and whether to probe
first (at most ``hubstore.PROBE_WAIT_S``) or give the verdict now; while healthy, desync and
straggler checks, each warned once (docs/watch.md, "Straggler warnings")."""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

from ddpnet.exitcodes import ExitCode
from ddpnet.watch import cutoff, desync, straggler
from ddpnet.watch.analyze import Options, analyze
from ddpnet.watch.dump import write_report, write_warnings
from ddpnet.watch.hubstore import LINKS, HubState, Probing
from ddpnet.watch.report import render_html, render_text, report_dict, warning_line
from ddpnet.watch.state import LINK_DOWN, Diagnosis, LinkProbe, Snapshot

#: seconds between straggler analyses of a healthy job
STRAGGLER_EVERY_S = 5.0
#: probe rounds for one network slowdown while none names its node or link
SLOWDOWN_ROUNDS = 3
#: seconds between comparisons of the ranks' collective digests (watch.desync)
DESYNC_EVERY_S = 1.0
#: how long a clean goodbye is held while others run (a later collective of theirs may show)
FAREWELL_HOLD_S = 2.5


class Decisions(HubState):
    """The watchdog's ticks, the straggler and desync checks, and the verdict."""

    def tick(self) -> None:
        if self.verdict_at is not None or not self.states or self.checks.running:
            return  # a closed channel being checked (watch.channel) may be the cause
        now = self.as_of()[0]
        if self.probing is not None and self.probing.trigger == LINKS and \
                self.probing.over(now):
            self.probing = None
        probing = self.probing
        if probing is not None and probing.straggler is None and probing.trigger != LINKS:
            # a stall's round: the verdict waits for it
            if probing.over(now):
                self.probing = None
                self.conclude(probing.trigger, tuple(probing.found), now)
            return
        snapshot = self.snapshot(leavers_only=True)
        dog = self.watchdog
        late = self.silent(snapshot, after=dog.late_after)  # silent ones among them: one pass
        silent = tuple(r for r in late if snapshot.age(r) > dog.stale_after)
        trigger = dog.due(snapshot, now, silent=silent, late=late) or self.desync_due(now)
        working, self.watchdog.warning = self.watchdog.warning, None
        self.warn(working)  # working ranks hold a stall's verdict: said once per stall
        if trigger is not None:
            self.probing = None  # a stall outranks a straggler's probes
            if not self.ask_probes(trigger, now):
                self.conclude(trigger, (), now)
            return
        self.release(now)
        if probing is None:
            self.check_stragglers(now)
            if self.probing is None:  # a straggler's round just asked: the links' waits
                self.probe_links(now)
        elif probing.trigger != LINKS and probing.over(now):
            self.probing = None
            self.warn_probed(probing)

    def release(self, now: float) -> None:
        """Answer the goodbyes held (FAREWELL_HOLD_S at most, at once when every rank is done)."""
        everyone = len(self.finished | set(self.left)) >= self.options.world_size
        for rank, since in list(self.leaving.items()):
            if everyone or now - since > FAREWELL_HOLD_S:
                del self.leaving[rank]
                for peer in list(self.peers.values()):
                    if peer.rank == rank:
                        self.send(peer, {"t": "farewell"})

    def desync_due(self, now: float) -> str | None:
        """Every DESYNC_EVERY_S: whether the ranks' collectives parted (``watch.desync``)."""
        if now < self.next_desync or self.watchdog.fired or self.desync_named or \
                self.published == self.desync_seen:
            return None
        self.next_desync, self.desync_seen = now + DESYNC_EVERY_S, self.published
        if desync.detect(self.snapshot()) is None:
            return None
        self.desync_named = True  # once: with watch_action="warn" the job goes on parted
        return "collectives parted"

    # -- straggler warnings ------------------------------------------------------------------

    def check_stragglers(self, now: float) -> None:
        """Every STRAGGLER_EVERY_S while healthy: one warning per distinct straggler; a network
        slowdown is probed first (:meth:`probe_slowdown`) so the warning names the node or link."""
        if now < self.next_straggler or self.left:
            return
        snapshot = replace(self.snapshot(leavers_only=True), probes=self.straggler_probes)
        if straggler.steps_published(snapshot) < 2 * straggler.MIN_STEPS:
            self.next_straggler = now + 1.0
            return
        self.next_straggler = now + STRAGGLER_EVERY_S
        found = straggler.detect(snapshot)
        if found is None:
            self.probed_wait, self.straggler_probes, self.slowdown_rounds = None, (), 0
            return
        if self.probe_slowdown(snapshot, now, found):
            return
        self.warn(found)

    def probe_slowdown(self, snapshot: Snapshot, now: float, found: Diagnosis) -> bool:
        """Start a probe round for a network slowdown: once (up to :data:`SLOWDOWN_ROUNDS` while
        none names it), and anew when the waits doubled. False when there is none to start."""
        wait = straggler.recent_wait(snapshot)
        worse = self.probed_wait is None or wait >= 2 * self.probed_wait
        retry = not self.straggler_probes and self.slowdown_rounds < SLOWDOWN_ROUNDS
        if not (worse or retry) or not straggler.wants_probes(replace(snapshot, probes=())):
            return False
        if worse:
            self.probed_wait, self.slowdown_rounds = wait, 0
        self.straggler_probes = ()
        return self.send_probes(tuple(range(self.options.world_size)), (), now,
                                trigger="straggler", slowdown=found, seen=snapshot)

    def warn_probed(self, probing: Probing) -> None:
        """A straggler's probe round is over: warn, named by the probes when they found it; judged
        with the steps that showed the slowdown, not the window at the round's end."""
        probes = tuple(probing.found)
        seen = probing.seen or self.snapshot(leavers_only=True)
        found = straggler.detect(replace(seen, probes=probes))
        if found is not None and found.hosts:
            self.straggler_probes = probes
            self.warn(found, probes)
        else:
            self.slowdown_rounds += 1
            self.warn(probing.straggler, probes)

    def warn(self, found: Diagnosis | None, probes: tuple[LinkProbe, ...] = ()) -> None:
        """One stderr line and a warnings.json entry per distinct straggler or held stall."""
        if found is None or (found.kind != "working" and
                             any(w.ranks == found.ranks for w in self.warnings)):
            return
        self.warnings.append(found)
        self.warned.append({"at": time.time(), **found.to_dict(),
                            **({"probes": [p.to_dict() for p in probes]} if probes else {})})
        sys.stderr.write(warning_line(found) + "\n")
        sys.stderr.flush()
        write_warnings(Path(self.options.directory), self.warned)

    # -- the verdict -------------------------------------------------------------------------

    def conclude(self, trigger: str, probes: tuple[LinkProbe, ...], now: float) -> None:
        """The verdict, unless ranks late in this stall are back (``Watchdog.outage``)."""
        if not self.watchdog.outage(replace(self.snapshot(), probes=probes), now):
            self.act(trigger, probes)

    def act(self, trigger: str, probes: tuple[LinkProbe, ...] = ()) -> None:
        snapshot = replace(self.snapshot(), probes=probes)
        diagnosis = analyze(snapshot, Options(stale_after=self.watchdog.stale_after))
        notes = tuple(n for n in (self.watchdog.note, self.watchdog.outage_note) if n)
        if notes:  # working ranks or an outage held it: until when, why
            diagnosis = replace(diagnosis, evidence=(*diagnosis.evidence, *notes))
        if diagnosis.kind == "network" and diagnosis.sub_kind == LINK_DOWN:
            # every other rank cut off may be this node's own link: read it (once a verdict)
            iface, link = cutoff.link_state(address=self.options.bind)
            diagnosis = cutoff.hub_node_down(diagnosis, snapshot, iface, link, self.options.bind)
        report = {**report_dict(diagnosis, snapshot, trigger, self.warnings),
                  "threshold": self.watchdog.threshold.to_dict(),
                  "hub_most_behind_s": round(self.most_behind, 3),
                  "slow_readers": sorted(self.slow_readers),
                  "channels_broken": {str(r): why for r, why in sorted(self.broken.items())}}
        directory = Path(self.options.directory)
        written = write_report(directory, report, render_html(diagnosis, snapshot, trigger))
        where = f"\n  report: {written}" if written else ""
        sys.stderr.write(render_text(diagnosis, snapshot, trigger) + where + "\n")
        sys.stderr.flush()
        self.watchdog.fired = True
        self.verdicts.append(diagnosis)
        self.judged_at = time.monotonic()  # a scrape that begins after this renders it
        if self.settings.action != "exit":
            return
        # with the states it needs to say which node is at fault (each launcher's recovery)
        verdict = {"t": "verdict", "diagnosis": diagnosis.to_dict(),
                   "code": int(ExitCode.WATCHDOG), "report": str(written or ""),
                   "context": snapshot.around(diagnosis).to_dict()}
        for peer in list(self.peers.values()):
            if peer.rank is not None:
                self.send(peer, verdict)
        self.verdict, self.verdict_at = verdict, time.monotonic()
