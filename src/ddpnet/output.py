"""The one printer. ``--json`` prints exactly one JSON object on stdout; human output goes
through rich; errors are one line plus a hint on stderr.

Every command's ``run(options)`` returns a result with ``exit_code`` and ``to_dict()``;
``cli/`` hands it to :func:`finish` with the command's human renderer."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

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


def emit_json(obj: Any) -> None:
    """Print one JSON object and nothing else on stdout."""
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def format_error(message: str, hint: str = "") -> str:
    """The two lines every user-facing error prints."""
    text = f"ddpnet: error: {message}"
    if hint:
        text += f"\nhint: {hint}"
    return text


def print_error(exc: DdpnetError) -> None:
    sys.stderr.write(format_error(exc.message, exc.hint) + "\n")
    sys.stderr.flush()


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
