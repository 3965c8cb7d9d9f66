"""SSH launches, the pure part: the system ``ssh`` command line, the remote command, and what
an ssh failure means (a cause id per host, docs/causes.md).

We write no SSH protocol: the system OpenSSH client runs every connection, in batch mode (a
password or host-key prompt fails at once instead of hanging a launch), with a connect timeout
and keepalives (a host that dies mid-job ends its ssh in ``ServerAliveInterval x
ServerAliveCountMax`` seconds). The edge that runs it is :mod:`ddpnet.launch.sshrun`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ddpnet.errors import ConfigError, DdpnetError
from ddpnet.exitcodes import ExitCode

#: seconds ssh may take to open the TCP connection (``-o ConnectTimeout``)
CONNECT_TIMEOUT = 5
#: keepalive probes: a silent host is given up after 5 s x 3
KEEPALIVE = ("ServerAliveInterval=5", "ServerAliveCountMax=3")
#: the status ssh itself exits with when it fails (not the remote command)
SSH_FAILED = 255
#: a shell's status for a command it cannot find
NOT_FOUND = 127
#: variables the launcher passes on to every host (DeepSpeed's runner passes the same
#: families): the user's NCCL/GLOO/TP settings, PYTHONPATH/PYTHONUNBUFFERED, torch's and ours
FORWARDED_PREFIXES = ("NCCL_", "GLOO_", "TP_", "PYTHON", "TORCH_", "DDPNET_")
#: variables never forwarded: they describe this process, not the job
_NOT_FORWARDED = frozenset({"PYTHONHOME", "PYTHONSTARTUP", "DDPNET_LAUNCH_ENGINE"})


@dataclass(frozen=True)
class SshOptions:
    """How to reach the hosts: ``--ssh-user``, ``--ssh-identity``, ``--ssh-option K=V``."""

    user: str | None = None
    identity: str | None = None
    options: tuple[str, ...] = ()
    connect_timeout: int = CONNECT_TIMEOUT

    def __post_init__(self) -> None:
        for opt in self.options:
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*=\S.*", opt):
                raise ConfigError(f"--ssh-option {opt!r} is not KEY=VALUE",
                                  "e.g. --ssh-option UserKnownHostsFile=/path/known_hosts")
        if self.user is not None and not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*",
                                                       self.user):
            raise ConfigError(f"--ssh-user {self.user!r} is not a user name",
                              "give the remote login name, e.g. --ssh-user alice")
        if not 1 <= self.connect_timeout <= 300:
            raise ConfigError(f"ssh connect timeout {self.connect_timeout} is outside 1..300 s",
                              "use a few seconds, e.g. 5")


@dataclass(frozen=True)
class HostfileOptions:
    """``--hostfile FILE`` with how to reach its hosts and the Python to run there (None: the
    launching interpreter's path, the same on every host)."""

    path: str
    ssh: SshOptions = SshOptions()
    python: str | None = None


def ssh_argv(opts: SshOptions, host: str, remote: str) -> list[str]:
    """``ssh ... -- host 'remote'``. The user's ``-o`` options come first, since ssh keeps
    the first value it reads for each option: theirs win over our defaults."""
    argv = ["ssh", "-T"]
    for opt in opts.options:
        argv += ["-o", opt]
    argv += ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={opts.connect_timeout}",
             "-o", KEEPALIVE[0], "-o", KEEPALIVE[1], "-o", "LogLevel=ERROR"]
    if opts.user:
        argv += ["-l", opts.user]
    if opts.identity:
        argv += ["-i", opts.identity, "-o", "IdentitiesOnly=yes"]
    return [*argv, "--", host, remote]


def forwarded_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The launcher's variables every host's ranks get too (pure)."""
    return {k: v for k, v in environ.items()
            if k.startswith(FORWARDED_PREFIXES) and k not in _NOT_FORWARDED}


def remote_command(argv: Sequence[str], env: Mapping[str, str], cwd: str) -> str:
    """The shell line the remote login shell runs: into ``cwd`` (the launcher's: scripts and
    relative paths are found as here), the variables set, then ``argv`` exec'd."""
    assigns = [f"{k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    words = " ".join(shlex.quote(a) for a in argv)
    prefix = f"exec env {' '.join(assigns)} " if assigns else "exec "
    return f"cd {shlex.quote(cwd)} && {prefix}{words}"


# ---- what an ssh failure means -------------------------------------------------------------

#: (cause id, patterns in ssh's stderr) in the order they are tried: the first match names
#: the failure
_SSH_PATTERNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ssh-host-key-changed", ("REMOTE HOST IDENTIFICATION HAS CHANGED",)),
    ("ssh-host-key-unknown", ("host key is known", "Host key verification failed")),
    ("ssh-auth-failed", ("Permission denied", "Too many authentication failures")),
    ("ssh-unresolvable", ("Could not resolve hostname",)),
    ("ssh-refused", ("Connection refused",)),
    ("ssh-unreachable", ("timed out", "No route to host", "Network is unreachable",
                         "Host is unreachable")),
)
#: every SSH cause id and its fix ({host} filled in)
SSH_CAUSE_FIXES = {
    "ssh-host-key-changed":
        "the host's key differs from known_hosts (reinstalled host, or a man in the middle): "
        "verify it, then `ssh-keygen -R {host}` and connect once by hand",
    "ssh-host-key-unknown":
        "add the host's key first: `ssh-keyscan {host} >> ~/.ssh/known_hosts` (verify it), "
        "or --ssh-option StrictHostKeyChecking=accept-new",
    "ssh-auth-failed":
        "set up passwordless SSH: `ssh-copy-id {host}` (or --ssh-identity KEY / --ssh-user "
        "NAME); check with `ssh -o BatchMode=yes {host} true`",
    "ssh-unresolvable":
        "use the host's IP address in the hostfile, or add it to /etc/hosts or DNS here",
    "ssh-refused":
        "no SSH server listens on {host}: start sshd there (or give the port with "
        "--ssh-option Port=N)",
    "ssh-unreachable":
        "{host} does not answer: is it up, is the name/address right, does a firewall drop "
        "port 22? (`ping {host}`, `nc -zv {host} 22`)",
    "ssh-command-not-found":
        "install the same Python environment on every host at the same path, or give its "
        "path with --remote-python; non-interactive shells do not read ~/.bash_profile, so "
        "set PATH in ~/.bashrc before its interactive-only return, or use absolute paths",
    "ssh-timeout":
        "{host} accepted the connection but did not answer in time: a login script waiting "
        "for input, or an overloaded host (`ssh {host} true`)",
    "ssh-workdir-missing":
        "make the working directory (and the script) exist on every host at the same path: "
        "a shared file system, or copy it there",
    "ssh-software-differs":
        "install the same Python, torch and ddpnet on every host (the versions the "
        "launching host has), e.g. from one lock file",
    "ssh-failed": "run `ssh -v {host} true` to see why",
}


@dataclass(frozen=True)
class HostProblem:
    """What stops an SSH launch on one host: a cause id, ssh's own words, the fix."""

    host: str
    cause: str
    detail: str

    @property
    def fix(self) -> str:
        return SSH_CAUSE_FIXES[self.cause].replace("{host}", self.host)

    @property
    def line(self) -> str:
        return f"{self.host}: {self.cause}: {self.detail}"

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.cause, "hosts": [self.host], "detail": self.detail,
                "fix": self.fix}


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.replace("\r", "").splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith("@@@")]
    return lines[-1][:300] if lines else "no output"


def classify(host: str, returncode: int, stderr: str, *, timed_out: bool = False
             ) -> HostProblem | None:
    """What an ssh run's status and stderr mean (pure); None when it succeeded."""
    if returncode == 0 and not timed_out:
        return None
    if timed_out:
        return HostProblem(host, "ssh-timeout", "no answer before the per-host timeout")
    if returncode == NOT_FOUND:
        return HostProblem(host, "ssh-command-not-found", _last_line(stderr))
    if returncode == SSH_FAILED:
        for cause, patterns in _SSH_PATTERNS:
            if any(p in stderr for p in patterns):
                return HostProblem(host, cause, _last_line(stderr))
        return HostProblem(host, "ssh-failed", _last_line(stderr))
    if "can't cd to" in stderr or ("cd:" in stderr and "No such file" in stderr):
        return HostProblem(host, "ssh-workdir-missing", _last_line(stderr))
    return HostProblem(host, "ssh-failed", f"exit {returncode}: {_last_line(stderr)}")


class SshError(DdpnetError):
    """An SSH launch could not start on every host (exit 1); ``problems`` names each host."""

    exit_code = ExitCode.CHECK_FAILED

    def __init__(self, cause: str, message: str, hint: str = "",
                 problems: tuple[HostProblem, ...] = ()) -> None:
        super().__init__(message, hint)
        self.cause = cause
        self.error_id = cause
        self.problems = problems

    @classmethod
    def of(cls, problems: Sequence[HostProblem], total: int) -> SshError:
        first = problems[0]
        more = f" (and {len(problems) - 1} more host(s), listed above)" if len(problems) > 1 \
            else ""
        return cls(first.cause, f"ssh preflight failed on {len(problems)} of {total} host(s): "
                   f"{first.line}{more}", first.fix, tuple(problems))


def compare_software(host: str, python: str, remote: Mapping[str, Any],
                     local: Mapping[str, Any]) -> HostProblem | None:
    """The host's Python, torch and ddpnet against the launching host's (pure): ranks of one
    job must run the same versions (a torch mismatch breaks the collectives' wire format)."""
    diffs = [f"{name} {remote.get(name)} (here {local.get(name)})"
             for name in ("python", "torch") if remote.get(name) != local.get(name)]
    if remote.get("ddpnet") is None:  # named with the rest: one fix covers them all
        diffs.append("ddpnet not importable")
    elif remote.get("ddpnet") != local.get("ddpnet"):
        diffs.append(f"ddpnet {remote.get('ddpnet')} (here {local.get('ddpnet')})")
    if diffs:
        return HostProblem(host, "ssh-software-differs",
                           f"{python} on {host} has " + ", ".join(diffs))
    return None
