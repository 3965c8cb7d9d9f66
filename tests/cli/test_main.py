"""The CLI's error boundary and start-up cost, run for real."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ddpnet.errors import from_os_error as _os_error
from ddpnet.exitcodes import ExitCode
from tests.conftest import RunCli, assert_user_error, clean_environ, nobody_cannot_run


def _modules_after(*args: str) -> set[str]:
    code = ("import sys\nfrom ddpnet.cli.main import main\ntry:\n"
            f"    main({list(args)!r})\nexcept SystemExit:\n    pass\n"
            "print(' '.join(sorted(sys.modules)), file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=clean_environ(), timeout=60)
    return set(proc.stderr.strip().splitlines()[-1].split())


def test_help_imports_neither_torch_nor_rich() -> None:
    loaded = _modules_after("--help")
    assert "torch" not in loaded
    assert not any(m == "rich" or m.startswith("rich.") for m in loaded)


def test_human_env_stays_torch_free() -> None:
    assert "torch" not in _modules_after("env")


def test_os_error_on_a_user_path_is_one_line(run_cli: RunCli, tmp_path: Path) -> None:
    # a directory where tune's sysctl drop-in goes: the dry run cannot read it
    (tmp_path / "etc" / "sysctl.d" / "90-ddpnet.conf").mkdir(parents=True)
    proc = run_cli("tune", "--root", str(tmp_path), "--distro", "ubuntu", "--json")
    assert_user_error(proc, ExitCode.USAGE, "90-ddpnet.conf", "Is a directory")
    # issue 17: under --json the error is an object on stdout, never nothing
    assert json.loads(proc.stdout)["error"]["exit_code"] == ExitCode.USAGE


def test_os_error_debug_keeps_the_traceback(run_cli: RunCli, tmp_path: Path) -> None:
    (tmp_path / "etc" / "sysctl.d" / "90-ddpnet.conf").mkdir(parents=True)
    proc = run_cli("--debug", "tune", "--root", str(tmp_path), "--distro", "ubuntu")
    assert proc.returncode == ExitCode.USAGE
    assert "Traceback" in proc.stderr and "ddpnet: error: " in proc.stderr


def test_permission_error_is_a_missing_requirement() -> None:
    err = _os_error(PermissionError(errno.EACCES, "Permission denied", "/etc/sysctl.d/x"))
    assert err.exit_code == ExitCode.MISSING_REQUIREMENT
    assert "/etc/sysctl.d/x" in err.message and err.hint


def test_other_os_error_is_bad_input() -> None:
    err = _os_error(FileNotFoundError(errno.ENOENT, "No such file or directory", "/nope"))
    assert err.exit_code == ExitCode.USAGE
    assert err.message == "cannot use /nope: No such file or directory"


def test_unknown_command_is_a_usage_error(run_cli: RunCli) -> None:
    proc = run_cli("nosuchcommand")
    assert_user_error(proc, ExitCode.USAGE, "nosuchcommand")


def test_a_mistyped_command_names_the_closest(run_cli: RunCli) -> None:
    assert_user_error(run_cli("lanch", "--", "t.py"), ExitCode.USAGE,
                      "No such command 'lanch'. Did you mean 'launch'?")


@pytest.mark.parametrize("command", ["launch", "sbatch", "exec", "k8s", "monitor", "tune"])
def test_one_interface_option_everywhere_its_alias_accepted(run_cli: RunCli,
                                                            command: str) -> None:
    """``--iface`` in every command's help; ``--ifname`` accepted, shown only as the alias."""
    helped = run_cli(command, "--help")
    assert helped.returncode == 0 and "--iface TEXT" in helped.stdout, helped.stdout
    assert "--iface, --ifname" not in helped.stdout and "(alias: --ifname)" in \
        " ".join(helped.stdout.split())
    import importlib

    from ddpnet.cli.main import COMMANDS

    cmd = importlib.import_module(COMMANDS[command][0]).command
    (param,) = [p for p in cmd.params if "--iface" in p.opts]
    assert param.opts == ["--iface", "--ifname"]


def test_bare_ddpnet_shows_help(run_cli: RunCli) -> None:
    proc = run_cli()
    assert proc.returncode == 0 and "Commands" in proc.stdout


def test_json_error_is_one_object_on_stdout(run_cli: RunCli) -> None:
    # issue 17 reverses the old rule (stdout stayed empty: a script parsing it got "")
    proc = run_cli("env", "--json", env={"RANK": "1"})
    assert_user_error(proc, ExitCode.USAGE, "WORLD_SIZE")
    assert json.loads(proc.stdout)["error"]["id"] == "config"
    ok = run_cli("env", "--json")
    assert isinstance(json.loads(ok.stdout), dict)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to run the CLI as an unprivileged user")
def test_permission_denied_on_a_user_path_is_exit_3() -> None:
    # pytest's tmp_path sits under a 0700 directory: use one nobody can traverse
    reason = nobody_cannot_run()
    if reason:
        pytest.skip(reason)
    tmp_path = Path(tempfile.mkdtemp(prefix="qa-perm-", dir="/tmp"))
    try:
        _permission_denied_case(tmp_path)
    finally:
        shutil.rmtree(tmp_path)


def _permission_denied_case(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    (tmp_path / "etc" / "sysctl.d").mkdir(parents=True)
    (tmp_path / "etc" / "os-release").write_text("ID=ubuntu\nVERSION_ID=22.04\n")
    secret = tmp_path / "etc" / "sysctl.d" / "90-ddpnet.conf"
    secret.write_text("")
    secret.chmod(0o600)
    proc = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m",
         "ddpnet", "tune", "--root", str(tmp_path), "--cluster-subnet", "10.0.0.0/24"],
        env=clean_environ(), capture_output=True, text=True, timeout=60, cwd="/")
    assert_user_error(proc, ExitCode.MISSING_REQUIREMENT, "permission denied",
                      "90-ddpnet.conf")


def _fake_command(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    import types

    import click

    from ddpnet.cli import main as climain

    @click.command("qa-boom")
    def command() -> int:
        raise exc

    module = types.ModuleType("qa_fake_command")
    module.command = command  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "qa_fake_command", module)
    monkeypatch.setitem(climain.COMMANDS, "qa-boom", ("qa_fake_command", "test only"))


def test_permission_error_in_a_command_exits_3(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from ddpnet.cli.main import main

    _fake_command(monkeypatch, PermissionError(errno.EACCES, "Permission denied", "/x/y"))
    with pytest.raises(SystemExit) as info:
        main(["qa-boom"])
    assert info.value.code == ExitCode.MISSING_REQUIREMENT
    err = capsys.readouterr().err
    assert err.startswith("ddpnet: error: permission denied: /x/y") and "\nhint: " in err


def test_os_error_without_a_path_is_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    # not a user's path: a bug, so the traceback stays
    from ddpnet.cli.main import main

    _fake_command(monkeypatch, ConnectionResetError(errno.ECONNRESET, "reset"))
    with pytest.raises(ConnectionResetError):
        main(["qa-boom"])


def test_os_error_names_the_flag_the_path_came_from() -> None:
    from ddpnet.errors import ConfigError, from_os_error

    err = from_os_error(FileNotFoundError(2, "No such file or directory", "/nope"), "--hostfile")
    assert isinstance(err, ConfigError)
    assert err.message == "--hostfile /nope: No such file or directory"
    assert "--hostfile" in err.hint


def test_help_lists_every_exit_code_from_exitcodes(run_cli: RunCli) -> None:
    """``ddpnet --help`` listed 0-3 only; it lists them all, from exitcodes.py."""
    from ddpnet.exitcodes import MEANINGS

    proc = run_cli("--help", env={"COLUMNS": "400"})
    epilog = " ".join(proc.stdout.split("Exit codes:", 1)[1].split())
    assert set(MEANINGS) == set(ExitCode)
    for code in ExitCode:
        assert f"{int(code)} {MEANINGS[code]}" in epilog, (code, epilog)


def test_no_help_word_is_longer_than_the_help_column() -> None:
    """click breaks a word longer than its help column (``reduce_s`` / ``catter`` in
    ``bench --help`` at 80 columns): a name in a help text must fit whole."""
    import importlib

    import click

    from ddpnet.cli.main import COMMANDS

    long = []
    for name, (module, _) in COMMANDS.items():
        cmd = importlib.import_module(module).command
        subs = list(cmd.commands.values()) if isinstance(cmd, click.Group) else []
        for c in (cmd, *subs):
            for p in c.params:
                long += [f"{name} {c.name} {p.name}: {w}" for w in
                         (getattr(p, "help", None) or "").split() if len(w) > 30]
    assert not long, long


def test_no_subcommand_help_is_cut_at_80_columns(run_cli: RunCli) -> None:
    """``ddpnet lab --help`` listed ``Remove the lab: its namespaces, veths, ...``."""
    proc = run_cli("lab", "--help", env={"COLUMNS": "80"})
    commands = proc.stdout.split("Commands:", 1)[1]
    assert "..." not in commands and "…" not in commands, commands


@pytest.mark.parametrize("command", [("env",), ("tune",)])
def test_a_reader_that_closed_the_pipe_is_not_an_error(command: tuple[str, ...]) -> None:
    """``ddpnet tune | head`` exited 1 (rich's and click's answer to EPIPE): the reader
    closes its end before any line is written, every write then fails."""
    import subprocess
    import sys

    from tests.conftest import clean_environ

    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([sys.executable, "-m", "ddpnet", *command], stdout=write,
                              stderr=subprocess.PIPE, text=True, env=clean_environ(),
                              timeout=120)
    finally:
        os.close(write)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr
