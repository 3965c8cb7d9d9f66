"""Flags several commands share: the one interface option (``--iface``, ``--ifname`` its
alias) and the check that a launched program does not start with a mistyped option of ours."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from ddpnet.launch.command import Target

F = TypeVar("F", bound=Callable[..., Any])


class AliasedOption(click.Option):
    """An option whose help shows its first name only; the others are accepted aliases."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        opts = self.opts
        self.opts = opts[:1]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = opts


def iface_option(dest: str, help: str, **kw: Any) -> Callable[[F], F]:
    """``--iface`` on every command that takes the job's interface (launch, sbatch, exec, k8s,
    monitor, tune), ``--ifname`` accepted as well: one name to learn, none refused."""
    return click.option("--iface", "--ifname", dest, cls=AliasedOption,
                        help=f"{help} (alias: --ifname)", **kw)


def refuse_own_option(program: Sequence[str]) -> None:
    """The program after ``--`` starts with an option: click passed an unknown option of ours
    on as the program (these commands take the rest unparsed). Name it as click names an
    unknown option, with its "did you mean"."""
    if not program or not program[0].startswith("-") or program[0] == "-m":
        return
    ctx = click.get_current_context()
    name = program[0].split("=", 1)[0]
    known = [opt for param in ctx.command.params for opt in (*param.opts,
                                                             *param.secondary_opts)]
    raise click.NoSuchOption(name, possibilities=[o for o in known if o.startswith("--")],
                             ctx=ctx)


def program_target(program: Sequence[str]) -> Target:
    """The program after ``--``, refused as :func:`refuse_own_option` says."""
    from ddpnet.launch.command import Target

    refuse_own_option(program)
    return Target.parse(program)
