"""The pure half of SSH launches: the ssh command line, the remote command, the variables
passed on, and what ssh's status and stderr mean (OpenSSH 9's own messages)."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from ddpnet.errors import ConfigError
from ddpnet.launch.ssh import (
    SSH_CAUSE_FIXES,
    HostProblem,
    SshError,
    SshOptions,
    classify,
    compare_software,
    forwarded_env,
    remote_command,
    ssh_argv,
)

_CHANGED = """\
@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @
@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!
Host key for n2 has changed and you have requested strict checking.
Host key verification failed.
"""

#: (ssh's status, its stderr, the cause)
SAMPLES = [
    (255, "root@n1: Permission denied (publickey).\r\n", "ssh-auth-failed"),
    (255, "Received disconnect from 10.0.0.1 port 22:2: Too many authentication failures\n",
     "ssh-auth-failed"),
    (255, "No ED25519 host key is known for n1 and you have requested strict checking.\r\n"
          "Host key verification failed.\r\n", "ssh-host-key-unknown"),
    (255, _CHANGED, "ssh-host-key-changed"),
    (255, "ssh: connect to host 198.18.0.77 port 22: No route to host\r\n", "ssh-unreachable"),
    (255, "ssh: connect to host 10.9.9.9 port 22: Connection timed out\r\n", "ssh-unreachable"),
    (255, "ssh: connect to host n1 port 22: Network is unreachable\r\n", "ssh-unreachable"),
    (255, "ssh: connect to host n1 port 22: Connection refused\r\n", "ssh-refused"),
    (255, "ssh: Could not resolve hostname nope: Name or service not known\r\n",
     "ssh-unresolvable"),
    (255, "kex_exchange_identification: Connection closed by remote host\r\n", "ssh-failed"),
    (127, "env: '/opt/py/bin/python': No such file or directory\n", "ssh-command-not-found"),
    (127, "bash: line 1: python3: command not found\n", "ssh-command-not-found"),
    (1, "bash: line 1: cd: /work/x: No such file or directory\n", "ssh-workdir-missing"),
    (2, "sh: 1: cd: can't cd to /work/x\n", "ssh-workdir-missing"),
    (3, "Traceback ...\nValueError: boom\n", "ssh-failed"),
]


@pytest.mark.parametrize(("code", "stderr", "cause"), SAMPLES)
def test_classify_names_each_ssh_failure(code: int, stderr: str, cause: str) -> None:
    problem = classify("n1", code, stderr)
    assert problem is not None
    assert problem.cause == cause
    assert "@@@" not in problem.detail and "\r" not in problem.detail
    assert problem.detail.strip()
    assert problem.fix and "{host}" not in problem.fix
    assert problem.line.startswith("n1: " + cause + ": ")


def test_success_and_timeout() -> None:
    assert classify("n1", 0, "") is None
    assert classify("n1", 0, "warning: something\n") is None
    timed = classify("n1", 124, "", timed_out=True)
    assert timed is not None and timed.cause == "ssh-timeout"


def test_every_cause_has_a_fix_naming_the_host() -> None:
    causes = {c for _, _, c in SAMPLES} | {"ssh-timeout", "ssh-software-differs"}
    assert causes == set(SSH_CAUSE_FIXES)
    assert "ssh-copy-id n7" in HostProblem("n7", "ssh-auth-failed", "x").fix


def test_ssh_argv_batch_mode_timeouts_and_user_options_first() -> None:
    opts = SshOptions(user="alice", identity="/k/id", options=("ConnectTimeout=2",
                                                              "UserKnownHostsFile=/k/kh"))
    argv = ssh_argv(opts, "n1", "true")
    assert argv[0] == "ssh" and argv[-3:] == ["--", "n1", "true"]
    pairs = [argv[i + 1] for i, a in enumerate(argv) if a == "-o"]
    assert pairs.index("ConnectTimeout=2") < pairs.index("ConnectTimeout=5")  # first wins
    assert {"BatchMode=yes", "ServerAliveInterval=5", "UserKnownHostsFile=/k/kh"} <= set(pairs)
    assert argv[argv.index("-l") + 1] == "alice" and argv[argv.index("-i") + 1] == "/k/id"


@pytest.mark.parametrize("kwargs", [
    {"options": ("BatchMode",)}, {"options": ("=x",)}, {"options": ("A=",)},
    {"user": "a b"}, {"user": "-oProxyCommand=x"}, {"connect_timeout": 0},
])
def test_bad_ssh_options_are_config_errors(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        SshOptions(**kwargs)  # type: ignore[arg-type]


def test_remote_command_survives_a_real_shell(tmp_path: object) -> None:
    """The line the remote login shell runs: quoting holds for spaces and quotes."""
    line = remote_command(["sh", "-c", 'printf "%s|%s" "$A" "$1"', "x", "it's a b"],
                          {"A": "v 'q' $HOME"}, "/")
    out = subprocess.run(["sh", "-c", line], capture_output=True, text=True, check=True)
    assert out.stdout == "v 'q' $HOME|it's a b"
    assert line.startswith("cd / && exec env ")
    assert shlex.split(line)[0] == "cd"


def test_forwarded_env_passes_job_variables_only() -> None:
    env = {"NCCL_DEBUG": "INFO", "PYTHONPATH": "/src", "GLOO_SOCKET_IFNAME": "eth1",
           "TORCH_CPP_LOG_LEVEL": "INFO", "DDPNET_DEBUG": "1", "HOME": "/root",
           "PATH": "/bin", "RANK": "3", "PYTHONHOME": "/x", "DDPNET_LAUNCH_ENGINE": "torchrun"}
    assert forwarded_env(env) == {"NCCL_DEBUG": "INFO", "PYTHONPATH": "/src",
                                  "GLOO_SOCKET_IFNAME": "eth1", "TORCH_CPP_LOG_LEVEL": "INFO",
                                  "DDPNET_DEBUG": "1"}


def test_compare_software() -> None:
    here = {"python": "3.11", "torch": "2.13.0", "ddpnet": "0.1.0"}
    assert compare_software("n1", "/py", here, here) is None
    other = compare_software("n1", "/py", {**here, "torch": "2.12.0"}, here)
    assert other is not None and other.cause == "ssh-software-differs"
    assert "torch 2.12.0 (here 2.13.0)" in other.detail
    missing = compare_software("n1", "/py", {**here, "ddpnet": None}, here)
    assert missing is not None and "not importable" in missing.detail


def test_ssh_error_names_first_host_and_counts() -> None:
    problems = [HostProblem("n1", "ssh-auth-failed", "Permission denied (publickey)."),
                HostProblem("n2", "ssh-unreachable", "No route to host")]
    err = SshError.of(problems, 3)
    assert err.error_id == "ssh-auth-failed" and err.exit_code == 1
    assert "2 of 3 host(s): n1: ssh-auth-failed" in err.message
    assert "1 more" in err.message and "ssh-copy-id n1" in err.hint
