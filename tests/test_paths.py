from __future__ import annotations

from pathlib import Path

from ddpnet.paths import dir_creatable, file_writable


def test_file_writable(tmp_path: Path) -> None:
    assert file_writable(str(tmp_path / "r.html")) is None
    assert "does not exist" in (file_writable(str(tmp_path / "no" / "r.html")) or "")
    assert "is a directory" in (file_writable(str(tmp_path)) or "")


def test_dir_creatable(tmp_path: Path) -> None:
    assert dir_creatable(str(tmp_path / "a" / "b")) is None
    assert dir_creatable(str(tmp_path)) is None
    (tmp_path / "f").write_text("x")
    assert "is not a directory" in (dir_creatable(str(tmp_path / "f" / "sub")) or "")


def test_a_path_permission_bits_allow_but_the_kernel_refuses() -> None:
    """/proc looks writable to root (os.access) but nothing can be made in it: known before a
    run, not at its first checkpoint (``train --checkpoint-dir /proc/x`` trained to the end)."""
    assert "cannot create anything in /proc" in (dir_creatable("/proc/x") or "")
    assert "cannot create anything in /proc" in (dir_creatable("/proc/x/y") or "")
    assert "cannot create anything in /proc" in (file_writable("/proc/report.html") or "")
