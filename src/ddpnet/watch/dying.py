"""How a watched rank ends other than by finishing: its own error, a peer's failure (wait for the
hub's verdict), SIGTERM (ask the hub first) and a failing ``sys.exit``; docs/watch.md, "Attach to an
unchanged script". The training thread may sit in a C++ collective, so a verdict exits with
``os._exit`` and a signal is learnt through the wakeup fd by a thread of ours."""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any, TextIO

from ddpnet.errors import short_error
from ddpnet.watch import patches

if TYPE_CHECKING:
    from ddpnet.watch.heartbeat import Beacon

#: the longest a rank that saw a peer fail, or got SIGTERM, waits for the verdict
VERDICT_WAIT_S = 10.0
#: the main thread waits this much longer for the SIGTERM guard's decision at exit
_MAIN_SLACK_S = 2.0
#: how long the exit sleeps (the GIL released) while a process group is alive
SETTLE_S = 0.02

#: exception types (by name, anywhere in the MRO) c10d raises when a peer or the network failed
_PEER_TYPES = frozenset({"DistError", "DistBackendError", "DistNetworkError", "DistStoreError"})
#: what gloo, NCCL and the store say in a plain RuntimeError when a peer went away
_PEER_WORDS = ("connection closed by peer", "connection reset by peer", "broken pipe",
               "connection refused", "timed out", "socket timeout", "no route to host",
               "communicator was aborted", "ncclremoteerror", "remote process exited",
               "network is unreachable")


def peer_failure(kind: type[BaseException], text: str) -> bool:
    """Whether an exception says a peer or the network failed, not this rank's own code
    (pure): such a rank waits for the verdict that names who."""
    names = {k.__name__ for k in kind.__mro__}
    if names & _PEER_TYPES:
        return True
    low = text.lower()
    return "RuntimeError" in names and any(w in low for w in _PEER_WORDS)


@contextlib.contextmanager
def uncaptured(stream: TextIO) -> Iterator[None]:
    """sys.stderr as the watch started while a rank waits for its verdict: torch's
    excepthook runs ours with sys.stderr swapped for a StringIO, and the verdict exits first."""
    captured = sys.stderr
    if not isinstance(captured, io.StringIO) or captured is stream:
        yield
        return
    sys.stderr = stream
    try:
        yield
    finally:
        sys.stderr = captured


class Ending:
    """How one watched rank ends: its excepthook, SIGTERM guard and ``sys.exit`` note."""

    def __init__(self, beacon: Beacon, verdict_wait: float = 0.0) -> None:
        self.beacon = beacon
        self.previous_hook = sys.excepthook
        #: seconds a rank dying of a peer's failure waits for the verdict (0: never)
        self.verdict_wait = verdict_wait
        #: the error of a failing ``sys.exit``: the goodbye carries it
        self.exit_error = ""
        self.unguard: Callable[[], None] = lambda: None
        self.unexit: Callable[[], None] = lambda: None

    def install(self) -> None:
        """The excepthook, ``sys.exit`` note, SIGTERM guard and settle (registered first: runs
        last)."""
        self.unexit = note_exits(self.exiting)
        sys.excepthook = self.excepthook
        if self.verdict_wait > 0:
            self.unguard = guard(self.beacon.verdict_within)
        register_settle()

    def close(self) -> None:
        """Say goodbye with a failing exit's error, and undo :meth:`install`."""
        self.unguard()
        self.beacon.close(self.exit_error)
        self.unexit()
        self.disown()

    def disown(self) -> None:
        """Give back the excepthook (a forked child's, or at the end)."""
        if sys.excepthook == self.excepthook:
            sys.excepthook = self.previous_hook

    def excepthook(self, kind: type[BaseException], exc: BaseException,
                   tb: TracebackType | None) -> None:
        if not issubclass(kind, Exception):  # Ctrl-C, SIGTERM: someone's intent
            self.beacon.close("")
            self.previous_hook(kind, exc, tb)
            return
        error = short_error(kind.__name__, str(exc))
        if self.waits_for(kind, str(exc)):
            # the traceback first (the user's own context), then the verdict
            self.await_peer_verdict(error, lambda: self.previous_hook(kind, exc, tb))
            return
        self.beacon.close(error)
        self.previous_hook(kind, exc, tb)

    def waits_for(self, kind: type[BaseException], text: str) -> bool:
        return self.verdict_wait > 0 and peer_failure(kind, text)

    def await_peer_verdict(self, error: str, before: Callable[[], None]) -> None:
        """After ``before`` (the traceback), wait for the verdict with SIGTERM held."""
        with holding(), uncaptured(self.beacon.stream):
            before()
            sys.stderr.write(f"ddpnet: watch: {error.split(':')[0]} from a peer; waiting "
                             f"up to {self.verdict_wait:.0f} s for the watch to name the "
                             "cause\n")
            sys.stderr.flush()
            self.beacon.await_verdict(error, self.verdict_wait)

    def exiting(self, error: str, handling: BaseException | None) -> None:
        """A failing ``sys.exit``; under mp.spawn it never reaches the excepthook, so it waits
        here."""
        if os.getpid() != self.beacon.owner:  # a forked child's exit is not this rank's
            return
        self.exit_error = error
        if isinstance(handling, Exception) and self.waits_for(type(handling), str(handling)):
            self.await_peer_verdict(short_error(type(handling).__name__, str(handling)),
                                    lambda: None)


# -- sys.exit -----------------------------------------------------------------------------

def describe(code: object) -> str:
    """The error a goodbye carries for ``sys.exit(code)``; "" for a success."""
    if code is None or code == 0:
        return ""
    if isinstance(code, int):
        return f"SystemExit: sys.exit({code})"
    return f"SystemExit: sys.exit({str(code)!r}) (exit code 1)"


def note_exits(on_exit: Callable[[str, BaseException | None], None]) -> Callable[[], None]:
    """Wrap ``sys.exit`` to report a failing exit to ``on_exit``; the undo."""
    def noted(_instance: object, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if threading.current_thread() is threading.main_thread():
            error = describe(args[0] if args else kwargs.get("status"))
            if error:
                on_exit(error, sys.exc_info()[1])

    warns = patches.Warns("a failing sys.exit is no longer told from a finished rank",
                          "report the warning to ddpnet")
    return patches.wrap(sys, "exit", warns, before=noted)


# -- the settle at exit -------------------------------------------------------------------

_registered: list[bool] = []


def settle() -> None:
    """Sleep while a process group is alive: gloo frees a collective's tensors after ``wait``, and
    finding the interpreter finalizing it aborts the process."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return
    time.sleep(SETTLE_S)


def register_settle() -> None:
    """Once a process: the earlier the call, the later :func:`settle` runs at exit."""
    if not _registered:
        _registered.append(True)
        atexit.register(settle)


# -- SIGTERM ------------------------------------------------------------------------------

#: waits up to the given seconds for the verdict (which exits the process)
VerdictWait = Callable[[float], None]


class _Guard:
    def __init__(self, wait_verdict: VerdictWait, reader: socket.socket,
                 writer: socket.socket) -> None:
        self.wait_verdict, self.reader, self.writer = wait_verdict, reader, writer
        self.owner = os.getpid()
        #: a SIGTERM was taken (by either thread) and awaits the guard thread's decision
        self.taken = threading.Event()
        self.decided = threading.Event()
        self.thread = threading.Thread(target=self.watch, name="ddpnet-watch-term",
                                       daemon=True)

    def on_term(self, signum: int, frame: FrameType | None) -> None:
        """Note the SIGTERM and return: the handler may run inside a lock the heartbeat needs."""
        if signal.getsignal(signal.SIGTERM) != self.on_term:
            return
        if os.getpid() != self.owner or not self.thread.is_alive():
            die()
        self.taken.set()

    def settle(self) -> None:
        """A SIGTERM taken and not yet decided is not dropped by an exit."""
        if self.taken.is_set() and os.getpid() == self.owner:
            self.decided.wait(VERDICT_WAIT_S + _MAIN_SLACK_S)
            die()

    def watch(self) -> None:
        while True:
            try:
                data = self.reader.recv(64)
            except OSError:
                return
            if not data:
                return
            if signal.SIGTERM in data and signal.getsignal(signal.SIGTERM) == self.on_term:
                self.taken.set()
                self.wait_verdict(VERDICT_WAIT_S)
                self.decided.set()
                die()


_guard: _Guard | None = None


def guard(wait_verdict: VerdictWait) -> Callable[[], None]:
    """Guard SIGTERM for this rank; the undo. A no-op where SIGTERM or the wakeup fd is someone
    else's."""
    global _guard
    if (_guard is not None or threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL):
        return lambda: None
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    if previous != -1:  # asyncio or the script's own: theirs
        signal.set_wakeup_fd(previous)
        reader.close()
        writer.close()
        return lambda: None
    taken = _guard = _Guard(wait_verdict, reader, writer)
    signal.signal(signal.SIGTERM, taken.on_term)
    taken.thread.start()
    return lambda: _unguard(taken)


def _unguard(taken: _Guard) -> None:
    global _guard
    if _guard is not taken or threading.current_thread() is not threading.main_thread():
        return
    taken.settle()
    _guard = None
    if signal.getsignal(signal.SIGTERM) == taken.on_term:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    current = signal.set_wakeup_fd(-1)
    if current != taken.writer.fileno():  # someone set theirs after ours: keep it
        signal.set_wakeup_fd(current)
    taken.writer.close()
    taken.reader.shutdown(socket.SHUT_RDWR)
    taken.reader.close()


def _forget_in_child() -> None:
    """A forked child drops the guard: its signals must not wake the parent's guard thread."""
    global _guard
    taken, _guard = _guard, None
    if taken is None:
        return
    with contextlib.suppress(ValueError, OSError):
        if signal.getsignal(signal.SIGTERM) == taken.on_term:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        taken.writer.close()
        taken.reader.close()


os.register_at_fork(after_in_child=_forget_in_child)


@contextlib.contextmanager
def holding() -> Iterator[None]:
    """Hold SIGTERM while the main thread waits for the verdict (then it ends the rank)."""
    held: list[int] = []
    try:
        previous = signal.signal(signal.SIGTERM, lambda signum, _frame: held.append(signum))
    except ValueError:  # not the main thread: nothing to hold
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        if held:
            die()


def die() -> None:
    """End this process by SIGTERM as if no handler were installed, from any thread."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    else:  # Python lets only the main thread set a disposition; libc does not mind
        import ctypes

        libc = ctypes.CDLL(None)
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.signal(signal.SIGTERM, None)  # SIG_DFL
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM])
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(1.0)
    os._exit(128 + signal.SIGTERM)
