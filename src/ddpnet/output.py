"""The one printer. ``--json`` prints exactly one JSON object on stdout; human output goes
through rich, whole at any width and on any stream (:func:`table`, :class:`Whole`); errors are
one line plus a hint on stderr.

Every command's ``run(options)`` returns a result with ``exit_code`` and ``to_dict()``;
``cli/`` hands it to :func:`finish` with the command's human renderer."""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import re
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TextIO

from ddpnet.errors import DdpnetError

if TYPE_CHECKING:  # rich is imported on first use: error paths and --help do not need it
    from rich.console import Console, ConsoleOptions, RenderableType
    from rich.measure import Measurement
    from rich.table import Table


def console(file: TextIO | None = None, width: int | None = None) -> Console:
    """Human output on stdout (plain when piped), or on ``file`` at ``width`` columns (tests).
    Lines are never wrapped or cut by us (``soft_wrap``): a long line stays one line in a file
    and the terminal folds it on screen; tables wrap their cells between words (:func:`table`)."""
    return _console_class()(file=file, width=width, highlight=False, soft_wrap=True)


@functools.cache
def _console_class() -> type[Console]:
    from rich.console import Console

    class PipeConsole(Console):
        """A reader that closed the pipe (``ddpnet tune | head``) is not an error: stop
        writing and raise BrokenPipeError, which the CLI exits 0 on (rich and click exit 1)."""

        def on_broken_pipe(self) -> None:
            self.quiet = True
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            # no errno: click turns an EPIPE OSError into exit 1 itself
            raise BrokenPipeError("stdout closed by its reader")

    return PipeConsole


def err_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


#: measuring width: wide enough that no cell is measured against the screen
_UNBOUNDED = 1 << 20


def fit_widths(ranges: Sequence[tuple[int, int]], available: int) -> list[int]:
    """Column widths (``(minimum, maximum)`` each, as rich measures) that fit in
    ``available`` columns where they can: the widest columns give way first, none below its
    minimum (its longest word; all of a :class:`Whole`), so no word is ever cut. A table whose
    minimums exceed ``available`` comes out wider than it: it overflows, it is never cut."""
    widths = [high for _, high in ranges]
    excess = sum(widths) - available
    while excess > 0:
        give = [i for i, w in enumerate(widths) if w > ranges[i][0]]
        if not give:
            break
        widest = max(widths[i] for i in give)
        for i in give:
            if widths[i] == widest and excess > 0:
                widths[i] -= 1
                excess -= 1
    return widths


class Whole:
    """Text that stays on one line (a command, a path, an address): measured at its full
    length, so a table column that holds it is never narrower; never wrapped, never cut.
    ``markup``: the text is rich markup (``[green]pass[/]``), as table cells are."""

    def __init__(self, text: str, style: str = "", markup: bool = False) -> None:
        self.text = text
        self.style = style
        self.markup = markup

    def _text(self) -> Any:
        from rich.text import Text

        text = Text.from_markup(self.text, style=self.style) if self.markup else Text(
            self.text, style=self.style)
        text.no_wrap, text.overflow = True, "ignore"
        return text

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        from rich.cells import cell_len
        from rich.measure import Measurement

        width = max((cell_len(line) for line in self._text().plain.splitlines()), default=0)
        return Measurement(width, width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Any]:
        yield self._text()


#: a table cell this short is one value (``+0.002 s``, ``eth0 (auto)``): never split
VALUE_MAX = 12


#: an IPv6 literal in brackets (``[fd00::2]``, ``[fe80::1%eth0]``), not yet escaped
_V6_BRACKETS = re.compile(r"(?<!\\)\[([0-9A-Fa-f]*:[0-9A-Fa-f:.]*(?:%[\w.-]+)?)\]")


def literal_brackets(text: str) -> str:
    """Markup ``text`` with its bracketed IPv6 literals escaped: rich reads ``[fd00::2]`` as a
    tag and drops it (``tcp://[fd00::2]:23456`` showed as ``tcp://:23456``)."""
    return _V6_BRACKETS.sub(r"\\[\1]", text)


def _value(cell: RenderableType | None) -> RenderableType | None:
    """A short string cell as a :class:`Whole` (it is a value with its unit or source, not
    prose to wrap); anything else as it is. Cells are markup: IPv6 literals are escaped."""
    if isinstance(cell, str):
        cell = literal_brackets(cell)
    if not isinstance(cell, str) or " " not in cell:
        return cell
    from rich.text import Text

    return Whole(cell, markup=True) if len(Text.from_markup(cell).plain) <= VALUE_MAX else cell


class WholeTable:
    """A rich table that is whole at any width: its cells wrap between words, never inside
    one; where even that does not fit, it is wider than the screen (see :func:`fit_widths`).
    Rich alone shrinks the widest column below its longest word and cuts it with an ellipsis
    (``127.0.…``, ``2.13.…``): in a file or a pipe it lays out for 80 columns."""

    def __init__(self, title: str | None = None, **options: Any) -> None:
        from rich.table import Table

        options.setdefault("header_style", "bold")
        self.table: Table = Table(title=title, **options)

    def add_column(self, header: str = "", **options: Any) -> None:
        self.table.add_column(header, **options)

    def add_row(self, *cells: RenderableType | None) -> None:
        self.table.add_row(*map(_value, cells))

    def add_section(self) -> None:
        self.table.add_section()

    def _widths(self, console: Console, options: ConsoleOptions) -> tuple[list[int], int]:
        """Each column's width (with padding) for ``options.max_width``, and the borders'."""
        table = self.table
        for column in table.columns:
            column.width = None
        table.width = None
        wide = options.update_width(_UNBOUNDED)
        ranges = [table._measure_column(console, wide, column) for column in table.columns]
        extra = table._extra_width
        return fit_widths([(r.minimum, r.maximum) for r in ranges],
                          options.max_width - extra), extra

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Any]:
        widths, extra = self._widths(console, options)
        table = self.table
        for index, (column, width) in enumerate(zip(table.columns, widths, strict=True)):
            column.width = max(1, width - table._get_padding_width(index))
        table.width = sum(widths) + extra  # rich lays out at this width, whatever the screen's
        yield table

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        from rich.measure import Measurement

        widths, extra = self._widths(console, options)
        return Measurement(sum(widths) + extra, sum(widths) + extra)


def table(title: str | None = None, columns: Sequence[str] = (), **options: Any) -> WholeTable:
    """The table every human renderer uses (see :class:`WholeTable`); ``columns`` are headers
    added with rich's defaults (``add_column`` for others)."""
    out = WholeTable(title, **options)
    for header in columns:
        out.add_column(header)
    return out


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


#: the user of this process typed flags (the ``ddpnet`` CLI and the ranks it starts), not
#: Python arguments (``ddpnet.init()`` in a script): hints name options as the user gave them
_flags = False


def speak_flags(on: bool = True) -> None:
    """Hints in this process name command-line flags (:func:`argument`); the CLI says so."""
    global _flags
    _flags = on


def argument(name: str, value: str | None = None) -> str:
    """An option as the user gives it: ``--backend gloo`` to a CLI user, ``backend='gloo'``
    to a Python caller of ``ddpnet.init()`` (:func:`speak_flags`)."""
    if _flags:
        flag = "--" + name.replace("_", "-")
        return flag if value is None else f"{flag} {value}"
    return name if value is None else f"{name}={value!r}"


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


def rank_ranges(ranks: Sequence[int]) -> str:
    """``0-1721, 1723, 1725-4095``: every rank, runs folded into ranges (pure): whole, and
    O(gaps) long, where 4,096 ranks listed one by one made a 20 KB line."""
    runs: list[list[int]] = []
    for r in sorted(set(ranks)):
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


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
