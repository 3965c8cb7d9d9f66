"""This rank's heartbeat (edge): a daemon thread that publishes the rank's state to the hub every
``period`` seconds over its own TCP connection, and obeys the hub's verdict. Layered:
``transport.HubLink`` < ``publish.Publisher`` < ``answers.Answers`` < ``selfjudge.SelfJudge`` <
:class:`Beacon` (connect, beat, end)."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from ddpnet.output import exit_now
from ddpnet.watch import activity, gaps
from ddpnet.watch.dump import write_state
from ddpnet.watch.recorder import Recorder
from ddpnet.watch.selfjudge import SelfJudge
from ddpnet.watch.state import CollectiveRecord, RankState
from ddpnet.watch.straggler import StragglerWindow
from ddpnet.watch.threshold import learn, learned, period_for
from ddpnet.watch.transport import LOST_AFTER_S, SOCKET_TIMEOUT_S

#: the longest a rank's clean goodbye waits for the hub's word (hub.FAREWELL_HOLD_S + 1)
FAREWELL_WAIT_S = 3.5


class Beacon(SelfJudge):
    """One rank's side of the side channel."""

    def __init__(self, recorder: Recorder, ident: RankState, directory: Path, *,
                 period: float | None = None, lost_after: float = LOST_AFTER_S,
                 override: float | None = None,
                 exit_now: Callable[[int], None] = exit_now,
                 stream: TextIO | None = None) -> None:
        super().__init__(ident, lost_after)
        self.recorder, self.directory = recorder, directory
        self.stream = stream if stream is not None else sys.stderr
        #: seconds between heartbeats: the job size's (``threshold.period_for``) unless given
        self.period = period_for(ident.world_size) if period is None else period
        self.threshold = self.judge_by = learn(learned({}), override=override)
        self.gaps = gaps.GapLog()
        self.peers = {}
        self.progressed = time.monotonic()
        self.exit_now = exit_now
        self.thread: threading.Thread | None = None
        self.window = StragglerWindow()
        self.window_lock = threading.Lock()
        self.activity = activity.shared()
        self.listeners = []
        self.no_fault = threading.Event()
        self.dying = threading.Event()
        self.known = threading.Event()
        #: the error this rank ended with (:meth:`close`)
        self.error = ""
        #: set once the handshake ended or the rank closed (a goodbye before it is lost)
        self.settled = threading.Event()

    def connect(self, address: str, port: int, *, token: str, patience: float = 10.0) -> None:
        """Connect to the hub, retrying while it starts, and check it is this job's (``token``)."""
        try:
            self._connect(address, port, token, patience)
        finally:
            self.settled.set()

    def _connect(self, address: str, port: int, token: str, patience: float) -> None:
        self.hub, self.token = (address, port), token
        with self.life:  # close() waits for the handshake; one after it is told here
            sock = self.open(patience)
            if self.stopped.is_set():  # the rank ended while this connected: its goodbye
                self.goodbye(self.error)
                self.outbox.drain(sock, SOCKET_TIMEOUT_S)
                self.sock = None
                sock.close()
                return
            self.handle_pending()
            self.thread = threading.Thread(target=self.run, name="ddpnet-watch-heartbeat",
                                           daemon=True)
            self.thread.start()

    def announce(self, record: CollectiveRecord) -> None:
        """A Python collective is about to run: tell the hub now (gloo may abort us inside)."""
        self.send({"t": "call", "rank": self.ident.rank, "record": record.to_dict()})

    def run(self) -> None:
        """Until goodbye: publish, read the hub's answers (a verdict first, even after a failed
        send), judge itself when the hub went quiet."""
        try:
            while not self.stopped.is_set():
                state = self.state()
                sock = self.sock
                if sock is None:
                    self.reconnect()
                    sock = self.sock
                if sock is not None:
                    self.send({"t": "state", "rank": self.ident.rank,
                               "state": state.to_dict()})
                    self.listen_until(time.monotonic() + self.period, sock)
                else:
                    self.stopped.wait(self.period)
                self.judge_self(state)
        finally:
            self.farewell.set()  # nobody answers a goodbye any more

    def verdict_within(self, wait: float) -> None:
        """On SIGTERM: tell the hub (``term``), wait up to ``wait`` s for the verdict; return at
        once on ``no-fault`` or with no hub to tell. A rank still connecting finishes its
        handshake."""
        self.no_fault.clear()
        deadline = time.monotonic() + wait
        self.settled.wait(wait)
        if not self.send({"t": "term", "rank": self.ident.rank}):
            return
        while time.monotonic() < deadline and not self.stopped.is_set():
            if self.obeyed.wait(0.05) or self.no_fault.is_set():
                return

    def await_verdict(self, error: str, wait: float) -> None:
        """This rank dies of a peer's failure: say so, wait up to ``wait`` s for the verdict, then
        close."""
        if not self.stopped.is_set():
            self.dying.set()
            deadline = time.monotonic() + wait
            # a bye sent before the handshake would be lost
            self.settled.wait(wait)
            # the verdict may already wait in the socket even when this bye cannot be sent
            self.send({"t": "bye", "rank": self.ident.rank, "error": error, "peer": True})
            while time.monotonic() < deadline and self.thread is not None and \
                    self.thread.is_alive() and not self.obeyed.is_set():
                time.sleep(0.05)
        self.close(error)

    def forget_in_child(self) -> None:
        """In a forked child: close (never shut down) its copies of this rank's listeners and
        connection, so that a dead rank's port does not answer from its worker."""
        self.stopped.set()
        sock, self.sock = self.sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()
        for listener in self.listeners:
            listener.forget()
        self.listeners = []

    def goodbye(self, error: str, wait: bool = False) -> None:
        """The last state and the goodbye; one dying of a peer's failure says so again."""
        self.send({"t": "state", "rank": self.ident.rank, "state": self.state().to_dict()})
        self.send({"t": "bye", "rank": self.ident.rank, "error": error,
                   **({"wait": True} if wait else {}),
                   **({"peer": True} if error and self.dying.is_set() else {})})

    def close(self, error: str = "") -> None:
        """Say goodbye (with this rank's error) and stop. A clean goodbye waits up to
        FAREWELL_WAIT_S for the hub's word (a desync verdict exits this rank with the others)."""
        with self.life:
            self.farewell_to_hub(error)
        self.settled.set()

    def farewell_to_hub(self, error: str) -> None:
        if self.stopped.is_set() or os.getpid() != self.owner:  # a forked child: not ours
            return
        self.error = error
        if error:
            self.stopped.set()
            write_state(self.directory, self.state(), f"exited with an error: {error}")
        wait = not error and self.thread is not None and self.thread.is_alive()
        self.goodbye(error, wait)
        self.drain()
        if wait:
            self.farewell.wait(FAREWELL_WAIT_S)
        self.stopped.set()
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()
        for listener in self.listeners:
            listener.close()
