"""Bad input: one error line, a hint, exit 2; --apply/--revert without root: exit 3."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import AS_NOBODY, RunCli, assert_user_error, clean_environ, nobody_cannot_run

BASE = ("tune", "--distro", "debian", "--firewall", "nftables")


@pytest.mark.parametrize("args,needle", [
    (("--cluster-subnet", "10.0.0.5/24"), "did you mean --cluster-subnet 10.0.0.0/24"),
    (("--cluster-subnet", "banana"), "is not a network"),
    (("--cluster-subnet", "0.0.0.0/0"), "never 0.0.0.0/0"),
    (("--cluster-subnet", "10.0.0.0/24", "--master-port", "70000"), "out of range"),
    (("--cluster-subnet", "10.0.0.0/24", "--master-port", "0"), "out of range"),
    (("--cluster-subnet", "10.0.0.0/24", "--static-ip", "10.0.0.0/24"), "network address"),
    (("--cluster-subnet", "10.0.0.0/24", "--static-ip", "10.0.0.11/24", "--gateway",
      "10.0.1.1"), "outside the static IP's prefix"),
    (("--cluster-subnet", "10.0.0.0/24", "--static-ip", "10.0.0.11"), "has no prefix"),
    (("--cluster-subnet", "10.0.0.0/24", "--gateway", "10.0.0.1"), "without --static-ip"),
    (("--cluster-subnet", "10.0.0.0/24", "--port-range", "60000-50000"), "LO < HI"),
    ((), "--cluster-subnet is required"),
    (("--cluster-subnet", "fd00::/64", "--static-ip", "fd00::5/64", "--dns", "10.0.0.2"),
     "not IPv6"),
])
def test_bad_input_exits_2(run_cli: RunCli, args: tuple[str, ...], needle: str) -> None:
    assert_user_error(run_cli(*BASE, *args), 2, needle)


def test_unknown_distro_exits_2(run_cli: RunCli) -> None:
    assert_user_error(run_cli("tune", "--distro", "gentoo"), 2, "gentoo")


def test_undetectable_distro_exits_2(run_cli: RunCli, tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/os-release").write_text("ID=gentoo\nVERSION_ID=2.15\n")
    proc = run_cli("tune", "--root", str(tmp_path), "--firewall", "none")
    assert_user_error(proc, 2, "unknown distribution", f"{tmp_path}/etc/os-release", "--distro")


def test_a_missing_os_release_is_named_under_root(run_cli: RunCli, tmp_path: Path) -> None:
    proc = run_cli("tune", "--root", str(tmp_path), "--firewall", "none")
    assert_user_error(proc, 2, f"{tmp_path}/etc/os-release is missing", "--distro")


def _as_nobody(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*AS_NOBODY, sys.executable, "-m", "ddpnet", *args],
        env=clean_environ(), capture_output=True, text=True, timeout=60, cwd="/")


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to run as another user")
@pytest.mark.parametrize("flag", ["--apply", "--revert"])
def test_apply_and_revert_need_root(flag: str) -> None:
    reason = nobody_cannot_run()
    if reason:
        pytest.skip(reason)
    root = Path(tempfile.mkdtemp(prefix="tn-root-"))  # pytest's tmp dirs are 0700
    try:
        root.chmod(0o755)
        proc = _as_nobody(*BASE, "--cluster-subnet", "10.0.0.0/24", "--root", str(root), flag)
        assert_user_error(proc, 3, "needs root", "sudo")
        assert list(root.iterdir()) == []
    finally:
        shutil.rmtree(root)
