"""A SIGTERM gives the watch a few seconds to name a peer's death before it ends this rank.

torchrun (like srun and mpirun) SIGTERMs every surviving rank within 0.1 s of one dying;
the hub names the dead rank (who, where, its last step) about 0.5 s later. Without a guard
the survivors die by SIGTERM first and nobody prints the cause. Python runs signal handlers
only in the main thread and only between bytecodes, and a rank blocked in a collective is
in C there, so the signal is learnt through Python's wakeup fd by a thread of ours: it waits
up to ``GRACE_S`` for the verdict (the heartbeat thread exits with the verdict's code), and
otherwise ends the process by SIGTERM as if nothing had caught it. A SIGTERM that is the
user's intent (scancel, kill) is told apart by the hub, which answers that no peer failed
(``watch.termination``): the wait ends then, ~0.6 s on, the script running on meanwhile: the
main thread's own handler returns at once. It must: Python runs it between any
two bytecodes, inside the watch's own locks too (a collective's announcement holds the
recorder's and the socket's), and a handler that waited there for the verdict kept the
heartbeat thread, which reads the verdict, from the state it needs; the rank then died by
SIGTERM after the grace without a word (a clean-clone CI run). A script that ends within the
grace still ends by SIGTERM (the undo at exit waits for the guard's decision).

Installed only where nobody else handles SIGTERM or uses the wakeup fd (a script's own
handler, ``ddpnet train``'s preemption, asyncio keep theirs), only in the main thread, and
undone in forked children (DataLoader workers die at once, as before). A framework that
installs its handler over ours later (Lightning's at ``fit``) owns SIGTERM from then on, even
where its handler calls ours too: the guard then neither waits nor ends the rank."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType

#: the longest a SIGTERM'd rank waits for the hub's verdict on a peer's failure (as long as
#: a rank that saw the failure itself: session.VERDICT_WAIT_S; under load the hub took over 5 s)
GRACE_S = 10.0
#: the main thread waits this much longer for the guard thread's decision at exit
_MAIN_SLACK_S = 2.0

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
        """The main thread's handler: notes the SIGTERM and returns, never waits (it may run
        inside a lock the heartbeat thread needs); the guard thread decides. Without a guard
        thread to decide (another process, the thread gone), dies as SIGTERM would. Called
        from a handler installed over ours that chains to it (Lightning's: it stops the fit
        gracefully, and the job ends 0), the SIGTERM is that handler's: nothing to decide."""
        if signal.getsignal(signal.SIGTERM) != self.on_term:
            return
        if os.getpid() != self.owner or not self.thread.is_alive():
            die()
        self.taken.set()

    def settle(self) -> None:
        """A SIGTERM taken and not yet decided is not dropped by an exit: wait for the guard's
        decision (which ends the process), then die as SIGTERM would."""
        if self.taken.is_set() and os.getpid() == self.owner:
            self.decided.wait(GRACE_S + _MAIN_SLACK_S)
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
                self.wait_verdict(GRACE_S)
                self.decided.set()
                die()


_guard: _Guard | None = None


def install(wait_verdict: VerdictWait) -> Callable[[], None]:
    """Guard SIGTERM for this rank; returns the undo. A no-op (and a no-op undo) outside the
    main thread or where SIGTERM or the wakeup fd is someone else's already."""
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
    guard = _guard = _Guard(wait_verdict, reader, writer)
    signal.signal(signal.SIGTERM, guard.on_term)
    guard.thread.start()
    return lambda: _uninstall(guard)


def _uninstall(guard: _Guard) -> None:
    global _guard
    if _guard is not guard or threading.current_thread() is not threading.main_thread():
        return
    guard.settle()
    _guard = None
    if signal.getsignal(signal.SIGTERM) == guard.on_term:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    current = signal.set_wakeup_fd(-1)
    if current != guard.writer.fileno():  # someone set theirs after ours: keep it
        signal.set_wakeup_fd(current)
    guard.writer.close()
    guard.reader.shutdown(socket.SHUT_RDWR)
    guard.reader.close()


def _forget_in_child() -> None:
    """A forked child (a DataLoader worker) has no guard thread: SIGTERM kills it at once, and
    its signals must not wake the parent's guard through the shared socket."""
    global _guard
    guard, _guard = _guard, None
    if guard is None:
        return
    with contextlib.suppress(ValueError, OSError):
        if signal.getsignal(signal.SIGTERM) == guard.on_term:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        guard.writer.close()
        guard.reader.close()


os.register_at_fork(after_in_child=_forget_in_child)


@contextlib.contextmanager
def holding() -> Iterator[None]:
    """Hold SIGTERM while a rank that saw a peer fail waits for the verdict (in the main
    thread, from the excepthook). A SIGTERM held ends the rank when the wait ends without a
    verdict (a verdict exits first, with its own code)."""
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
    """End this process by SIGTERM as if no handler were installed (its exit status says
    SIGTERM to the launcher), from any thread."""
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
