"""What ``ddpnet tune`` reads from this machine before and after it plans (edge): the user
id, the root directory, os-release, firewalld's default zone, live sysctl values.

(The interface and firewall facts are read by :mod:`ddpnet.tune.facts`.)"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ddpnet.errors import ConfigError, RequirementError


def need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise RequirementError(
            f"ddpnet tune {what} needs root: it writes under /etc and loads kernel and "
            "firewall settings",
            f"run `sudo ddpnet tune {what} ...`, or leave out {what} for a dry run")


def check_root_dir(root: Path) -> None:
    """``--root`` is a directory this user can list."""
    try:
        if not root.is_dir():
            raise ConfigError(f"--root {root} is not a directory", "create it first")
        os.listdir(root)
    except PermissionError:
        raise ConfigError(f"--root {root} is not readable by this user",
                          "run as a user who can read it (or as root)") from None


def read_os_release(root: Path) -> tuple[str | None, Path]:
    """os-release's text under ``root`` (etc/, else usr/lib/) and its path; None when absent
    (the path is then etc/os-release, for the error that names it)."""
    for rel in ("etc/os-release", "usr/lib/os-release"):
        p = root / rel
        if p.is_file():
            return p.read_text(errors="replace"), p
    return None, root / "etc/os-release"


def read_sysctls(keys: Iterable[str]) -> dict[str, str | None]:
    """Each key's value in /proc/sys now; None when the kernel has no such key here."""
    live: dict[str, str | None] = {}
    for key in keys:
        try:
            live[key] = Path("/proc/sys", *key.split(".")).read_text()
        except OSError:
            live[key] = None
    return live
