"""This rank's heartbeat (edge): a daemon thread that publishes the rank's state to the hub
every ``period`` seconds over its own TCP connection (not the process group it watches), and
obeys the hub's verdict: write this rank's dump, say why on stderr, exit with the watchdog's
code. The training thread may be stuck inside a C++ collective, so exiting is ``os._exit``.

Every socket operation has a timeout; a hub that vanishes only ends the heartbeat.
"""

from __future__ import annotations

import os
import select
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ddpnet.watch.dump import write_state
from ddpnet.watch.recorder import Recorder
from ddpnet.watch.state import CollectiveRecord, Diagnosis, RankState
from ddpnet.watch.wire import Lines, encode

#: seconds between heartbeats
PERIOD_S = 1.0
#: bound on each send and on connecting
SOCKET_TIMEOUT_S = 2.0


def _exit_now(code: int) -> None:
    sys.stderr.flush()
    os._exit(code)


class Beacon:
    """One rank's side of the side channel."""

    def __init__(self, recorder: Recorder, ident: RankState, directory: Path, *,
                 period: float = PERIOD_S,
                 exit_now: Callable[[int], None] = _exit_now) -> None:
        self.recorder, self.ident, self.directory = recorder, ident, directory
        self.period = period
        self.exit_now = exit_now
        self.sock: socket.socket | None = None
        self.send_lock = threading.Lock()
        self.stopped = threading.Event()
        self.lines = Lines()
        self.thread: threading.Thread | None = None

    def state(self) -> RankState:
        records = self.recorder.records()
        rec = self.recorder
        done = [r.seq for r in records if r.ended is not None]
        with rec.lock:
            return replace(self.ident, step=rec.step, phase=rec.phase,
                           phase_since=rec.phase_since, last_seq=max(done, default=0),
                           recent=records, step_times=tuple(rec.step_times),
                           published=time.time())

    def connect(self, address: str, port: int, *, token: str, patience: float = 10.0) -> None:
        """Connect to the hub, retrying while it starts, and check it is this job's (``token``);
        OSError after ``patience`` or when something else answers there."""
        deadline = time.monotonic() + patience
        while True:
            try:
                self.sock = socket.create_connection((address, port), timeout=SOCKET_TIMEOUT_S)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.send({"t": "hello", "rank": self.ident.rank, "token": token})
        welcome = self.expect("welcome")
        if welcome.get("token") != token:
            self.sock = None
            raise OSError(f"what listens at {address}:{port} is not this job's hub "
                          f"({welcome.get('token') or 'no answer'})")
        self.thread = threading.Thread(target=self.run, name="ddpnet-watch-heartbeat",
                                       daemon=True)
        self.thread.start()

    def send(self, message: dict[str, Any]) -> bool:
        sock = self.sock
        if sock is None:
            return False
        try:
            with self.send_lock:
                sock.sendall(encode(message))
        except OSError:
            self.sock = None
            return False
        return True

    def expect(self, kind: str) -> dict[str, Any]:
        """The first message of ``kind`` within the socket timeout ({} if none)."""
        sock = self.sock
        deadline = time.monotonic() + SOCKET_TIMEOUT_S
        while sock is not None and time.monotonic() < deadline:
            try:
                data = sock.recv(1 << 16)
                messages = self.lines.feed(data)
            except (OSError, ValueError):
                return {}
            if not data:
                return {}
            for message in messages:
                if message.get("t") == kind:
                    return message
        return {}

    def announce(self, record: CollectiveRecord) -> None:
        """A Python collective is about to run: tell the hub now (gloo may abort us inside)."""
        self.send({"t": "call", "rank": self.ident.rank, "record": record.to_dict()})

    def run(self) -> None:
        while not self.stopped.is_set() and self.sock is not None:
            if not self.send({"t": "state", "rank": self.ident.rank,
                              "state": self.state().to_dict()}):
                return
            self.listen(self.period)

    def listen(self, seconds: float) -> None:
        sock = self.sock
        if sock is None:
            return
        try:
            ready, _, _ = select.select([sock], [], [], seconds)
            data = sock.recv(1 << 16) if ready else None
        except (OSError, ValueError):
            data = b""
        if data == b"":  # the hub is gone: nobody watches any more
            self.sock = None
            return
        for message in self.lines.feed(data or b""):
            if message.get("t") == "verdict":
                self.obey(message)

    def obey(self, verdict: dict[str, Any]) -> None:
        diagnosis = Diagnosis.from_dict(verdict.get("diagnosis", {}))
        code = int(verdict.get("code", 1))
        path = write_state(self.directory, self.state(), f"watchdog: {diagnosis.summary}")
        dump = f"; dump {path}" if path else ""
        sys.stderr.write(f"ddpnet: watch: rank {self.ident.rank} exits ({code}): "
                         f"{diagnosis.kind}: {diagnosis.summary}{dump}\n")
        self.exit_now(code)

    def close(self, error: str = "") -> None:
        """Say goodbye (with the error that ends this rank, if any) and stop."""
        if self.stopped.is_set():
            return
        self.stopped.set()
        if error:
            write_state(self.directory, self.state(), f"exited with an error: {error}")
        self.send({"t": "state", "rank": self.ident.rank, "state": self.state().to_dict()})
        self.send({"t": "bye", "rank": self.ident.rank, "error": error})
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()
