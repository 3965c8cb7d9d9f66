"""The ``--hostfile`` and SSH flags ``launch`` and ``check`` share (parsing only)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from ddpnet.launch.ssh import HostfileOptions

F = TypeVar("F", bound=Callable[..., Any])

_FLAGS = (
    click.option("--hostfile", default=None, metavar="FILE",
                 help="Start on every host of FILE over SSH ('host slots=N', 'host:N' or "
                 "'host' per line; the first host is rank 0)."),
    click.option("--ssh-user", default=None, help="Remote login name (default: ssh's)."),
    click.option("--ssh-identity", default=None, metavar="KEY", help="Private key for ssh -i."),
    click.option("--ssh-option", "ssh_option", multiple=True, metavar="KEY=VALUE",
                 help="Passed as ssh -o KEY=VALUE (repeatable; wins over ddpnet's defaults)."),
    click.option("--remote-python", default=None, metavar="PATH",
                 help="Python on the hosts (default: this interpreter's path)."),
)


def ssh_flags(func: F) -> F:
    for flag in reversed(_FLAGS):
        func = flag(func)
    return func


def hostfile_options(hostfile: str | None, ssh_user: str | None, ssh_identity: str | None,
                     ssh_option: tuple[str, ...], remote_python: str | None
                     ) -> HostfileOptions | None:
    """The frozen options, or None without ``--hostfile`` (SSH flags then refused)."""
    from ddpnet.errors import ConfigError
    from ddpnet.launch.ssh import HostfileOptions, SshOptions

    if hostfile is None:
        if ssh_user or ssh_identity or ssh_option or remote_python:
            raise ConfigError("the --ssh-* and --remote-python flags need --hostfile",
                              "add --hostfile FILE, or drop them")
        return None
    ssh = SshOptions(user=ssh_user, identity=ssh_identity, options=tuple(ssh_option))
    return HostfileOptions(hostfile, ssh, remote_python)
