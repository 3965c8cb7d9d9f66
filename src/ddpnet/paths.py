"""Paths a user names for us to write (a report, a checkpoint directory, a ``file://`` store):
checked before any work runs, so a typo costs a second, not a whole check or training run.

Edge module (stats the file system); each function returns why not, or None when fine.
"""

from __future__ import annotations

import os
import tempfile


def _create_in(directory: str) -> str | None:
    """Why nothing can be created in ``directory``, by trying (a directory made and removed
    at once): permission bits do not say it for root, /proc, /sys or a read-only mount."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".ddpnet-probe-", dir=directory))
    except OSError as exc:
        return f"cannot create anything in {directory}: {exc.strerror or exc}"
    return None


def file_writable(path: str) -> str | None:
    """None when ``path`` can be created or replaced as a file, else why not."""
    if os.path.isdir(path):
        return f"{path} is a directory"
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        return f"directory {directory} does not exist"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"directory {directory} is not writable by this user"
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return f"{path} exists and is not writable by this user"
    return _create_in(directory)


def dir_creatable(path: str) -> str | None:
    """None when ``path`` is a writable directory or can be made one (``mkdir -p``)."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe):
        return f"{probe} is not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"directory {probe} is not writable by this user"
    return _create_in(probe)
