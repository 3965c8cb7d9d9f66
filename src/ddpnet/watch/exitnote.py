"""A rank that calls ``sys.exit(3)`` mid-training is not one that finished.

``SystemExit`` never reaches ``sys.excepthook``, and the goodbye at exit cannot read the exit
code, so without this a rank that gave up (``sys.exit(1)`` on a NaN loss, ``sys.exit(main())``
returning 2) said a clean goodbye: the hub took it for finished and blamed the ranks still
in the next collective ("an extra collective at the end", the code's bug). ``sys.exit`` is
wrapped while the watch runs: a code that is not 0 (or None) from the main thread is noted,
and the goodbye carries it, so the hub names that rank as gone with its code. A bare
``raise SystemExit(3)`` is not seen (nothing in Python reports it before exit). The exception
being handled when ``sys.exit`` is called goes with it: a wrapper that catches a peer's
failure and exits 1 (mp.spawn's child does) is one more rank dying of that failure."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

from ddpnet.watch import patches


def describe(code: object) -> str:
    """The error a goodbye carries for ``sys.exit(code)``; "" for a success."""
    if code is None or code == 0:
        return ""
    if isinstance(code, int):
        return f"SystemExit: sys.exit({code})"
    return f"SystemExit: sys.exit({str(code)!r}) (exit code 1)"


def note_exits(on_exit: Callable[[str, BaseException | None], None]) -> Callable[[], None]:
    """Wrap ``sys.exit`` (``watch.patches``) to tell ``on_exit`` the error of a failing exit
    from the main thread (a thread's SystemExit ends only that thread) and the exception being
    handled there, if any; returns the undo."""
    def noted(_instance: object, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if threading.current_thread() is threading.main_thread():
            error = describe(args[0] if args else kwargs.get("status"))
            if error:
                on_exit(error, sys.exc_info()[1])

    # a failure of ours here loses only the exit's code: the exit itself goes on
    guard = patches.Warns("a failing sys.exit is no longer told from a finished rank",
                          "report the warning to ddpnet")
    return patches.wrap(sys, "exit", guard, before=noted)
