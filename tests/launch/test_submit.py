"""``ddpnet sbatch``'s edge: the script file, sbatch's answers (a fake sbatch on PATH)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ddpnet.errors import ConfigError, RequirementError
from ddpnet.launch.command import Target
from ddpnet.launch.sbatch import SbatchConfig, render
from ddpnet.launch.submit import SbatchOptions, job_id, run

CFG = SbatchConfig(target=Target.parse(["train.py"]), nodes=2)


def _fake_sbatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    exe = tmp_path / "bin" / "sbatch"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ['PATH']}")


def test_script_file_is_written_executable_and_not_submitted(tmp_path: Path) -> None:
    path = tmp_path / "job.sh"
    result = run(SbatchOptions(CFG, script_path=str(path)))
    assert path.read_text() == render(CFG) == result.script
    assert path.stat().st_mode & stat.S_IXUSR and result.job_id is None


def test_submit_reads_the_job_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_sbatch(tmp_path, monkeypatch, 'cat > "$0.in"; echo "4242;cluster"\n')
    result = run(SbatchOptions(CFG, submit=True))
    assert result.job_id == "4242"
    assert (tmp_path / "bin" / "sbatch.in").read_text() == render(CFG)


def test_rejected_job_names_sbatch_s_reason(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_sbatch(tmp_path, monkeypatch, 'echo "error: invalid partition" >&2; exit 1\n')
    with pytest.raises(ConfigError, match="invalid partition"):
        run(SbatchOptions(CFG, submit=True))


def test_missing_sbatch_is_a_requirement(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(RequirementError, match="sbatch not found"):
        run(SbatchOptions(CFG, submit=True))


def test_job_id_needs_digits() -> None:
    assert job_id("17\n") == "17"
    with pytest.raises(ConfigError, match="no job id"):
        job_id("Submitted?")


def test_sbatch_json_prints_one_object_with_the_script(tmp_path: Path) -> None:
    """``ddpnet sbatch --json``: a script can read the script and where it went (issue 17)."""
    import json
    import subprocess
    import sys

    out = tmp_path / "job.sh"
    proc = subprocess.run([sys.executable, "-m", "ddpnet", "sbatch", "--nodes", "2", "--json",
                           "--script", str(out), "--", "train.py"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["script_path"] == str(out) and data["job_id"] is None
    assert data["script"] == out.read_text() and "#SBATCH --nodes=2" in data["script"]
