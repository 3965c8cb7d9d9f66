"""A rank's answers to the hub (edge): the verdict it obeys (dump, line, ``os._exit``: the training
thread may sit in a C++ collective), the acks' thresholds, the peers it checks when the hub goes
quiet, and the link probes the hub asks for."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from ddpnet.watch.dump import write_state
from ddpnet.watch.probe import (
    BACKEND,
    PORTS_KEY,
    SIDE,
    SINK,
    STREAM_BYTES,
    ProbeSink,
    listening_ports,
    probe_pairs,
)
from ddpnet.watch.publish import Publisher
from ddpnet.watch.state import Diagnosis, RankState
from ddpnet.watch.threshold import TEACH_NOTHING, Threshold


class Answers(Publisher):
    """The answering part of a :class:`~ddpnet.watch.heartbeat.Beacon`."""

    directory: Path
    #: stderr as the watch started (torch's excepthook swaps in a StringIO: ``dying.uncaptured``)
    stream: TextIO
    exit_now: Callable[[int], None]
    #: the peers (address and side port) to check when the hub goes quiet
    peers: dict[int, RankState]
    listeners: list[ProbeSink]
    #: set when the hub answered this rank's SIGTERM: no peer failed, a user's stop
    no_fault: threading.Event

    def handle(self, message: dict[str, Any]) -> None:
        kind = message.get("t")
        if kind == "verdict":
            self.obey(message)
        elif kind == "farewell":
            self.farewell.set()
        elif kind == "no-fault":
            self.no_fault.set()
        elif kind == "ack" and isinstance(message.get("threshold"), dict):
            self.known.set()
            self.threshold = Threshold.from_dict(message["threshold"])
            self.told_nothing |= self.threshold.source in TEACH_NOTHING
            base = message.get("base")
            self.base = Threshold.from_dict(base) if isinstance(base, dict) else None
        elif kind == "peers":
            self.peers = self.named(message)
        elif kind == "probe":
            threading.Thread(target=self.probe, args=(message,), name="ddpnet-watch-probe",
                             daemon=True).start()

    def named(self, message: dict[str, Any]) -> dict[int, RankState]:
        """The peers a message names, with their addresses and ports."""
        return {int(r): RankState(rank=int(r), world_size=self.ident.world_size,
                                  address=str(p.get("address", "")),
                                  extra={PORTS_KEY: p.get("ports", {})})
                for r, p in dict(message.get("peers", {})).items()}

    def probe(self, request: dict[str, Any]) -> None:
        """Probe the peers the hub named and send back what was found."""
        me = self.ident.rank
        try:
            peers = self.named(request)
            found = probe_pairs(peers, me, timeout=float(request.get("timeout", 2.0)),
                                group=[int(r) for r in request.get("group", [*peers, me])],
                                stream_bytes=STREAM_BYTES if request.get("stream", True) else 0,
                                note=self.activity.note_watch)
        except (OSError, ValueError, TypeError, RuntimeError):
            found = ()
        self.activity.note_watch()  # the probes' CPU is the watch's, not this rank's work
        self.send({"t": "probes", "rank": me, "id": request.get("id"),
                   "probes": [p.to_dict() for p in found]})

    def open_ports(self, *, gloo: bool, exclude: tuple[int, ...] = ()) -> dict[str, int]:
        """Listen for peers' probes and publish the ports: ``side``, ``sink`` and, for gloo only,
        ``backend`` (NCCL's listener must not be poked)."""
        note = self.activity.note_watch  # a peer's probe is no work of this rank's
        side = ProbeSink(self.ident.address, max_conns=8, idle=2.0, note=note)
        sink = ProbeSink(self.ident.address, note=note)
        self.listeners = [side, sink]
        ports = {SIDE: side.port, SINK: sink.port}
        if gloo:
            found = listening_ports(exclude=(*ports.values(), *exclude))
            if found:
                ports[BACKEND] = found[0]
        self.ident = replace(self.ident, extra={**self.ident.extra, PORTS_KEY: ports})
        return ports

    def obey(self, verdict: dict[str, Any]) -> None:
        self.farewell.set()
        diagnosis = Diagnosis.from_dict(verdict.get("diagnosis", {}))
        code = int(verdict.get("code", 1))
        context = verdict.get("context")
        heard = {"diagnosis": diagnosis.to_dict(), "snapshot": context} \
            if isinstance(context, dict) else None
        path = write_state(self.directory, self.state(), f"watchdog: {diagnosis.summary}",
                           heard=heard)
        self.exit_saying(code, diagnosis, path)

    def exit_saying(self, code: int, diagnosis: Diagnosis, dump: Path | None,
                    details: str = "") -> None:
        """The verdict's line (then ``details``) on :attr:`stream`, flushed, and the exit."""
        where = f"; dump {dump}" if dump else ""
        with contextlib.suppress(OSError, ValueError):  # a closed or broken pipe
            self.stream.write(f"ddpnet: watch: rank {self.ident.rank} exits ({code}): "
                              f"{diagnosis.kind}: {diagnosis.summary}{where}\n{details}")
            self.stream.flush()
        self.obeyed.set()
        self.exit_now(code)
