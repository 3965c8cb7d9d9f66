"""``ddpnet``: the entry point, a lazily loaded command registry and the error boundary.

Commands are modules under ``ddpnet.cli`` exposing a click command named ``command``; they are
imported only when run, so ``ddpnet --help`` never imports torch.
"""

from __future__ import annotations

import importlib
import signal
import sys
from typing import cast

import click

from ddpnet import __version__, exitcodes
from ddpnet.errors import DdpnetError, Terminated, UsageError, from_os_error, raise_terminated
from ddpnet.exitcodes import ExitCode
from ddpnet.output import json_mode, speak_flags

#: name -> (module, one-line help shown by ``ddpnet --help`` without importing the module)
COMMANDS: dict[str, tuple[str, str]] = {
    "env": ("ddpnet.cli.env", "Resolve rank, world size and master from any launcher."),
    "check": ("ddpnet.cli.check", "Check the whole cluster at once; root cause first."),
    "launch": ("ddpnet.cli.launch", "Run a script on every rank with torchrun or mpirun."),
    "exec": ("ddpnet.cli.exec", "Export the torch variables from any launcher and exec."),
    "sbatch": ("ddpnet.cli.sbatch", "Render (and submit) a SLURM batch script for a job."),
    "k8s": ("ddpnet.cli.k8s", "Render a Kubernetes PyTorchJob or JobSet, checked at start."),
    "bench": ("ddpnet.cli.bench", "Collective bandwidth (busbw) against the link's real rate."),
    "doctor": ("ddpnet.cli.doctor", "Check this node for every cause of a hang or slow job."),
    "lab": ("ddpnet.cli.lab", "A virtual multi-node cluster in network namespaces, with faults."),
    "monitor": ("ddpnet.cli.monitor", "Live network, TCP and GPU telemetry on this node."),
    "tune": ("ddpnet.cli.tune", "Tune sysctl, firewall, hosts, env; dry run unless --apply."),
    "train": ("ddpnet.cli.train", "Reference DDP training: comm hooks, AMP, resumable."),
    "diagnose": ("ddpnet.cli.diagnose", "Name why a running job hangs, or why it died."),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module = importlib.import_module(COMMANDS[cmd_name][0])
        command: click.Command = module.command
        return command

    def resolve_command(self, ctx: click.Context, args: list[str]
                        ) -> tuple[str | None, click.Command | None, list[str]]:
        """A mistyped command names the closest one, as click does for options."""
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in COMMANDS:
            import difflib

            close = difflib.get_close_matches(name, list(COMMANDS), n=1)
            if close:
                ctx.fail(f"No such command {name!r}. Did you mean {close[0]!r}?")
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=f"Exit codes: {exitcodes.summary()}; launch and exec pass the job's own code "
    "through (docs/exit-codes.md).",
)
@click.option("--debug", is_flag=True, envvar="DDPNET_DEBUG",
              help="Show tracebacks for errors (also DDPNET_DEBUG=1).")
@click.version_option(__version__, prog_name="ddpnet")
def cli(debug: bool) -> None:
    """ddpnet: from fresh Linux nodes to verified, tuned, fast multi-node PyTorch training."""


#: click >= 8.2 raises this for a bare group invocation
_NO_ARGS: type[click.UsageError] = getattr(
    click.exceptions,
    "NoArgsIsHelpError",
    getattr(click.exceptions, "NoArgsIsHelp", click.UsageError),
)


def _json_requested(argv: list[str]) -> bool:
    """``--json`` among ddpnet's own arguments (not a launched script's, after ``--``)."""
    own = argv[:argv.index("--")] if "--" in argv else argv
    return "--json" in own


#: what :func:`main` turns into one line and an exit code (any other exception is a bug)
_HANDLED = (DdpnetError, click.ClickException, click.Abort, KeyboardInterrupt, Terminated,
            OSError)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; map every error to its exit code, one line and a hint (and the JSON error
    object under ``--json``), no traceback unless ``--debug``."""
    args = list(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, raise_terminated)
    json_mode(_json_requested(args))
    speak_flags()  # hints name --flags, not Python arguments
    try:
        code = cli.main(args=args, prog_name="ddpnet", standalone_mode=False)
    except _HANDLED as exc:
        if isinstance(exc, OSError) and not isinstance(exc, BrokenPipeError) \
                and exc.filename is None:  # not about a path (a socket, a pipe): a bug, show it
            raise
        sys.exit(_report(exc, args))
    sys.exit(int(code) if isinstance(code, int) else int(ExitCode.OK))


def _report(exc: BaseException, args: list[str]) -> int:
    """Say what went wrong the way a user should see it (called while handling ``exc``);
    return the exit code."""
    # imported here, not at the top: ``ddpnet --help`` does not need rich
    from ddpnet.output import debug_requested, report_error

    if isinstance(exc, _NO_ARGS):  # bare `ddpnet`: show the help
        click.echo(exc.format_message())
        return int(ExitCode.OK)
    if isinstance(exc, Terminated):
        sys.stderr.write("ddpnet: terminated\n")
        return 128 + exc.signum
    if isinstance(exc, (click.Abort, KeyboardInterrupt)):
        sys.stderr.write("ddpnet: interrupted\n")
        return int(ExitCode.INTERRUPTED)
    if isinstance(exc, BrokenPipeError):
        return int(ExitCode.OK)
    return report_error(_as_user_error(exc), as_json=_json_requested(args),
                        debug=debug_requested(args))


def _as_user_error(exc: BaseException) -> DdpnetError:
    """A click error, or an OSError on a path the user gave, as our one-line error."""
    if isinstance(exc, click.UsageError):
        command = exc.ctx.command_path if exc.ctx else "ddpnet"
        return UsageError(exc.format_message(), f"see: {command} --help")
    if isinstance(exc, click.ClickException):
        return UsageError(exc.format_message())
    if isinstance(exc, OSError):
        return from_os_error(exc)
    return cast(DdpnetError, exc)
