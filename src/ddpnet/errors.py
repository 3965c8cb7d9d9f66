"""One exception hierarchy for every user-facing failure.

Each error carries what went wrong (``message``, one line naming where: host/rank), a
``hint`` with the fix, and the exit code the CLI returns. The CLI prints
``ddpnet: error: <message>`` and ``hint: <hint>`` on stderr and never a traceback.
"""

from __future__ import annotations

from ddpnet.exitcodes import ExitCode


class DdpnetError(Exception):
    """Base of every error ddpnet reports to a user."""

    exit_code: ExitCode = ExitCode.USAGE
    #: a stable id for scripts (the JSON error object's ``id``)
    error_id: str = "usage"

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        if hint and hasattr(self, "add_note"):  # Python >= 3.11 (PEP 678)
            # a script calling ddpnet.init() shows a traceback, not our one-line report: the
            # note puts the hint under the message there too; str(exc) stays the message
            self.add_note(f"hint: {hint}")

    def __str__(self) -> str:
        return self.message


class UsageError(DdpnetError):
    """A command line click could not parse: unknown option, bad value (exit 2)."""

    exit_code = ExitCode.USAGE
    error_id = "usage"


class Terminated(BaseException):
    """SIGTERM (or SIGHUP) reached this process: raised in the main thread so ``finally``
    blocks stop children and clean up, then the CLI exits 128+N. A BaseException, so no
    ``except Exception`` swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def raise_terminated(signum: int, frame: object) -> None:
    """A signal handler: turn the signal into :class:`Terminated`."""
    raise Terminated(signum)


class ConfigError(DdpnetError):
    """Bad input or configuration: flags, environment variables, files (exit 2)."""

    exit_code = ExitCode.USAGE
    error_id = "config"


class RequirementError(DdpnetError):
    """Something the command needs is absent: root, a system tool, a kernel feature (exit 3)."""

    exit_code = ExitCode.MISSING_REQUIREMENT
    error_id = "missing-requirement"


class CheckFailed(DdpnetError):
    """A check or verdict failed (exit 1)."""

    exit_code = ExitCode.CHECK_FAILED
    error_id = "check-failed"


class TrainingDiverged(DdpnetError):
    """Training stopped on a non-finite loss or gradient norm (exit 1): a run that diverged
    never reports success."""

    exit_code = ExitCode.CHECK_FAILED
    error_id = "training-diverged"


class RendezvousError(DdpnetError):
    """The process group could not come up; ``cause`` is a stable id such as
    ``master-port-filtered`` that scripts and ``ddpnet check`` match on."""

    exit_code = ExitCode.CHECK_FAILED

    def __init__(
        self,
        cause: str,
        message: str,
        hint: str = "",
        *,
        host: str = "",
        rank: int | None = None,
        detail: str = "",
    ) -> None:
        super().__init__(message, hint)
        self.cause = cause
        self.error_id = cause
        self.host = host
        self.rank = rank
        self.detail = detail


class AddressError(RendezvousError):
    """A rendezvous address that cannot work as the user wrote it (a link-local MASTER_ADDR
    without its zone): bad input (exit 2), named by its cause id like any other."""

    exit_code = ExitCode.USAGE


def from_os_error(exc: OSError, flag: str | None = None) -> DdpnetError:
    """A file-system error on a path the user named (``--root``, ``--record``...) as one line:
    permission problems are a missing requirement (exit 3), the rest bad input (exit 2).
    ``flag`` names the option the path came from, so the line says which one to fix."""
    where = f" {exc.filename}" if exc.filename is not None else ""
    what = exc.strerror or type(exc).__name__
    if isinstance(exc, PermissionError):
        return RequirementError(f"permission denied:{where} ({what})",
                                "run as a user allowed to read and write it (root for "
                                "system paths), or choose another path")
    if flag is not None:
        return ConfigError(f"{flag}{where}: {what}", f"give {flag} an existing, readable path")
    return ConfigError(f"cannot use{where}: {what}",
                       "check the path named in the command; --debug shows where it failed")


def short_error(kind: str, text: str, limit: int = 160) -> str:
    """``RuntimeError: Connection reset by peer ...`` without gloo's source path (pure)."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    if first.startswith("[") and "] " in first:
        first = first.split("] ", 1)[1]
    first = first if len(first) <= limit else first[:limit - 3] + "..."
    return f"{kind}: {first}" if first else kind
