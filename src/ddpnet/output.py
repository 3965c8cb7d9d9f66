"""The one printer. ``--json`` prints exactly one JSON object on stdout; human output goes
through rich; errors are one line plus a hint on stderr.

Every command's ``run(options)`` returns a result with ``exit_code`` and ``to_dict()``;
``cli/`` hands it to :func:`finish` with the command's human renderer."""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import threading
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from ddpnet.errors import DdpnetError

if TYPE_CHECKING:  # rich is imported on first use: error paths and --help do not need it
    from rich.console import Console


def console() -> Console:
    """Human output on stdout (plain when piped)."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def err_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def strict(obj: Any, path: str = "$", notes: list[str] | None = None) -> Any:
    """``obj`` with every NaN/Infinity replaced by None (strict JSON has neither), each
    replacement named in ``notes`` (pure)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        if notes is not None:
            notes.append(f"{path} was {obj} (not valid JSON): shown as null")
        return None
    if isinstance(obj, dict):
        return {k: strict(v, f"{path}.{k}", notes) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict(v, f"{path}[{i}]", notes) for i, v in enumerate(obj)]
    return obj


def dumps(obj: Any, *, pretty: bool) -> str:
    """Strict JSON text of ``obj``: NaN/Infinity become null, noted under ``json_notes``."""
    notes: list[str] = []
    clean = strict(obj, notes=notes)
    if notes and isinstance(clean, dict):
        clean["json_notes"] = notes
    return json.dumps(clean, indent=2 if pretty else None, allow_nan=False, default=str)


#: ``--json`` was asked for in this process (the CLI and the rank entries say so)
_json_mode = False
#: the real stdout's file descriptor while fd 1 is lent to stderr (:func:`lend_stdout`)
_lent_fd: int | None = None


def json_mode(on: bool) -> None:
    """Tell the printer this process prints ``--json``: :func:`lend_stdout` acts only then."""
    global _json_mode
    _json_mode = on


def lend_stdout() -> None:
    """Under ``--json``, point fd 1 at stderr for the rest of the process: C libraries write
    there directly (NCCL with ``NCCL_DEBUG=INFO``, at init, at teardown, from its threads)
    and would break the one JSON object on stdout; :func:`emit_json` writes to the real
    stdout, kept on a duplicate. Called where a process group comes up
    (``process_group.init``, check's group stage); idempotent, a no-op without ``--json``."""
    global _lent_fd
    if not _json_mode or _lent_fd is not None:
        return
    sys.stdout.flush()
    _lent_fd = os.dup(1)
    os.dup2(2, 1)


def restore_stdout() -> None:
    """Give fd 1 its stdout back (tests; a process that outlives its group)."""
    global _lent_fd
    if _lent_fd is None:
        return
    sys.stdout.flush()
    os.dup2(_lent_fd, 1)
    os.close(_lent_fd)
    _lent_fd = None


def _write_stdout(text: str) -> None:
    """``text`` on the real stdout, also while fd 1 is lent to stderr."""
    if _lent_fd is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    data = text.encode()
    while data:
        data = data[os.write(_lent_fd, data):]


def emit_json(obj: Any) -> None:
    """Print one JSON object and nothing else on stdout, in one write: indented on a terminal,
    one line otherwise (JSON Lines), so ranks whose stdout a launcher merges (srun, mpirun)
    stay parseable line by line."""
    tty = os.isatty(_lent_fd) if _lent_fd is not None else sys.stdout.isatty()
    _write_stdout(dumps(obj, pretty=tty) + "\n")


#: one relayed line at a time: lines from many hosts interleave but never mix
_relay_lock = threading.Lock()


def relay_line(line: str, *, prefix: str | None = None, stderr: bool = False) -> None:
    """A line another process printed (a remote host's rank), passed on whole: ``[prefix]
    line`` (or as it was, without ``prefix``) on our stdout, or on stderr."""
    text = f"[{prefix}] {line}\n" if prefix is not None else f"{line}\n"
    with _relay_lock:
        if stderr:
            sys.stderr.write(text)
            sys.stderr.flush()
        else:
            _write_stdout(text)


def exit_now(code: int) -> NoReturn:
    """Flush what was printed, then ``os._exit``: for a process whose main thread may sit
    inside a C++ collective or store call, or whose torch/gloo teardown can abort it
    ("terminate called without an active exception"), where a normal exit is not safe."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed or broken pipe
            stream.flush()
    os._exit(code)


def format_error(message: str, hint: str = "") -> str:
    """The two lines every user-facing error prints."""
    text = f"ddpnet: error: {message}"
    if hint:
        text += f"\nhint: {hint}"
    return text


def error_object(error_id: str, message: str, hint: str, exit_code: int) -> dict[str, Any]:
    """The JSON error object every command prints on stdout under ``--json``."""
    return {"error": {"id": error_id, "message": message, "hint": hint or None,
                      "exit_code": exit_code}}


def print_error(exc: DdpnetError, as_json: bool = False) -> None:
    """One line plus ``hint:`` on stderr; with ``as_json`` also the error object on stdout."""
    if as_json:
        emit_json(error_object(exc.error_id, exc.message, exc.hint, int(exc.exit_code)))
    sys.stderr.write(format_error(exc.message, exc.hint) + "\n")
    sys.stderr.flush()


def debug_requested(argv: list[str] | None = None) -> bool:
    """``--debug`` among the arguments, or DDPNET_DEBUG set (not to 0)."""
    return "--debug" in (argv or []) or os.environ.get("DDPNET_DEBUG", "") not in ("", "0")


def report_error(exc: DdpnetError, *, as_json: bool = False, debug: bool = False) -> int:
    """Print a user error (traceback first only with ``debug``); return its exit code."""
    if debug:
        traceback.print_exc()
    print_error(exc, as_json=as_json)
    return int(exc.exit_code)


def guarded(call: Callable[[], int], *, as_json: bool = False) -> int:
    """Run a rank's body (``python -m ddpnet.<cmd>``) with the CLI's error conventions: a user
    error is one line + hint (and the JSON object under ``as_json``), Ctrl-C exits 130."""
    try:
        return call()
    except DdpnetError as exc:
        return report_error(exc, as_json=as_json, debug=debug_requested())
    except KeyboardInterrupt:
        sys.stderr.write("ddpnet: interrupted\n")
        return 130


class Result(Protocol):
    """What a command's ``run(options)`` returns."""

    @property
    def exit_code(self) -> int: ...

    def to_dict(self) -> dict[str, Any]: ...


def finish(result: Result, as_json: bool,
           human: Callable[[Any, Console], None] | None = None) -> int:
    """Print ``result`` as one JSON object or through ``human``; return its exit code."""
    if as_json:
        emit_json(result.to_dict())
    elif human is not None:
        human(result, console())
    return int(result.exit_code)
