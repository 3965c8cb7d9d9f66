"""tune never reads or writes outside --root: crafted journals, symlinks out of the root,
symlinks inside it, and temp files a killed run left behind."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ddpnet.errors import ConfigError
from ddpnet.tune import apply as ap
from ddpnet.tune.model import FileChange, Part, Plan
from tests.conftest import RunCli, assert_user_error
from tests.tune.fixtures import FACTS, request


def _journal(root: Path, **entries: object) -> None:
    path = root / ap.JOURNAL.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"version": 1, "dirs": [], "files": {}, "touched": {}, "parts": {}}
    data.update(entries)
    path.write_text(json.dumps(data))


def _plan(path: str, content: str) -> Plan:
    return Plan(request("debian", "none"), FACTS, (Part("hosts", files=(FileChange(path, content),)),))


@pytest.mark.parametrize("crafted", [
    {"files": {"/../canary": {"action": "created", "backup": None}}},
    {"files": {"/etc/../../canary": {"action": "created", "backup": None}}},
    {"touched": {"/../canary": {"backup": None}}},
    {"dirs": ["/../outside"]},
    {"files": {"/etc/hosts": {"action": "modified", "backup": "../../../canary"}}},
])
def test_a_crafted_journal_touches_nothing_outside_the_root(tmp_path: Path,
                                                            crafted: dict[str, object]) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/hosts").write_text("mine\n")
    canary = tmp_path / "canary"
    canary.write_text("keep me\n")
    (tmp_path / "outside").mkdir()
    _journal(root, **crafted)
    with pytest.raises(ConfigError) as err:
        ap.revert(root, live=False)
    assert "root" in str(err.value) or "backup" in str(err.value)
    assert canary.read_text() == "keep me\n"
    assert (tmp_path / "outside").is_dir()


def test_revert_with_a_crafted_journal_is_one_line(tmp_path: Path, run_cli: RunCli) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/os-release").write_text('ID=debian\nVERSION_ID="12"\n')
    canary = tmp_path / "canary"
    canary.write_text("keep me\n")
    _journal(root, files={"/../canary": {"action": "created", "backup": None}})
    proc = run_cli("tune", "--root", str(root), "--revert")
    assert_user_error(proc, 2, "outside --root")
    assert canary.read_text() == "keep me\n"


def test_a_symlink_out_of_the_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    outside = tmp_path / "hosts-outside"
    outside.write_text("other system\n")
    (root / "etc/hosts").symlink_to(outside)
    with pytest.raises(ConfigError, match="outside --root"):
        ap.apply(_plan("/etc/hosts", "new\n"), root, live=False)
    assert outside.read_text() == "other system\n"


def test_a_symlink_inside_the_root_is_written_where_it_points(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc/real").mkdir(parents=True)
    (root / "etc/real/hosts").write_text("old\n")
    (root / "etc/hosts").symlink_to("real/hosts")
    ap.apply(_plan("/etc/hosts", "new\n"), root, live=False)
    assert (root / "etc/hosts").is_symlink()
    assert (root / "etc/real/hosts").read_text() == "new\n"
    ap.revert(root, live=False)
    assert (root / "etc/hosts").is_symlink()
    assert (root / "etc/real/hosts").read_text() == "old\n"


def test_temp_files_of_a_killed_run_are_cleaned(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/hosts").write_text("old\n")
    dead = 2 ** 22 + 12345  # above pid_max's default: no such process
    stale = root / f"etc/.hosts.ddpnet-{dead}"
    stale.write_text("half")
    alive = root / f"etc/.hosts.ddpnet-{os.getppid()}"  # another live writer: left alone
    alive.write_text("in flight")
    ap.apply(_plan("/etc/hosts", "new\n"), root, live=False)
    assert not stale.exists() and alive.exists()
    assert (root / "etc/hosts").read_text() == "new\n"


@pytest.mark.parametrize("revert", [
    [{"argv": ["sh", "-c", "touch /tmp/pwned"]}],
    [{"argv": ["sysctl", "-w", "a=b\x00c"]}],
    [{"argv": ["nft", "list", "ruleset"], "onlyif": ["rm", "-rf", "/"]}],
    [{"argv": []}],
])
def test_a_journal_with_foreign_revert_commands_runs_nothing(
        tmp_path: Path, revert: list[dict[str, object]]) -> None:
    """``--revert`` runs as root: a journal whose revert commands are not tune's own tools
    (or hold a NUL) is refused whole, before any command runs."""
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    _journal(root, parts={"firewall": {"revert": revert}})
    ran: list[list[str]] = []

    def runner(argv: object) -> tuple[int, str]:
        ran.append(list(argv))  # type: ignore[call-overload]
        return 0, ""

    with pytest.raises(ConfigError):
        ap.revert(root, runner=runner, live=True)
    assert ran == []
