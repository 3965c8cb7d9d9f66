"""Shared output conventions: ``--json`` prints exactly one JSON object on stdout; human
output goes through rich; errors are one line plus a hint on stderr."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

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
