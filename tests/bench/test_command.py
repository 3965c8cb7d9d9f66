"""``ddpnet.bench.command``: output directories checked first, the argv of a local rank (no CLI
in between), waiting on real local ranks (timeout), and the worker entry's error path."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from ddpnet.bench.command import check_output_dirs, run, wait_local, worker_argv
from ddpnet.bench.config import BenchConfig
from ddpnet.bench.options import BenchOptions
from ddpnet.bench.render import report
from ddpnet.bench.result import BenchResult, LinkRate, make_row
from ddpnet.bench.verdict import BenchOutcome, Problem
from ddpnet.errors import CheckFailed, ConfigError
from ddpnet.local import LocalRanks
from tests.conftest import assert_user_error, clean_environ

OPTIONS = BenchOptions(BenchConfig(collectives=("all_reduce",)), local=3, timeout=30.0)


def test_output_dirs_checked_before_anything_runs(tmp_path: Path) -> None:
    check_output_dirs(replace(OPTIONS, csv_path=str(tmp_path / "rows.csv")))
    missing = tmp_path / "nope" / "bw.png"
    with pytest.raises(ConfigError) as err:
        run(replace(OPTIONS, plot_path=str(missing), local=64))  # would start 64 ranks
    assert err.value.message == f"--plot {missing}: directory {missing.parent} does not exist"


def test_worker_argv_is_a_module_entry_with_the_rank_options() -> None:
    argv = worker_argv(OPTIONS)
    assert argv[:3] == [sys.executable, "-m", "ddpnet.bench"] and len(argv) == 4
    assert BenchOptions.from_json(argv[3]) == replace(OPTIONS, local=None, deadline=True)


def test_wait_local_past_timeout_is_check_failed() -> None:
    with LocalRanks([sys.executable, "-c", "import time; time.sleep(60)"], 2) as ranks:
        started = time.monotonic()
        with pytest.raises(CheckFailed, match=r"--local 2: ranks did not finish within 0\.5s"):
            wait_local(ranks, timeout=0.5)
        assert time.monotonic() - started < 10
        assert all(p.poll() is not None for p in ranks.procs)


def test_worker_entry_reports_errors_like_the_cli(tmp_path: Path) -> None:
    options = replace(OPTIONS, local=None, csv_path=str(tmp_path / "no" / "x.csv"))
    proc = subprocess.run([sys.executable, "-m", "ddpnet.bench", options.to_json()],
                          env=clean_environ(), capture_output=True, text=True, timeout=60)
    assert_user_error(proc, 2, "--csv", "does not exist")
    assert proc.stdout == ""


def _result() -> BenchResult:
    row = make_row("all_reduce", 1024, 256, "float32", "sum", True, [0.001], 1.0, None, None)
    return BenchResult("gloo", 2, "cpu", LinkRate(None, "none"), (row,))


def test_report_prints_what_this_process_reports(capsys: pytest.CaptureFixture[str]) -> None:
    found = (Problem("busbw below --min-busbw 9 Gb/s: all_reduce 0.008", "compare"),)
    assert report(BenchOutcome(1, _result(), found), as_json=True) == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["rows"][0]["collective"] == "all_reduce"
    assert err == "ddpnet: error: busbw below --min-busbw 9 Gb/s: all_reduce 0.008\n" \
                  "hint: compare\n"
    assert report(BenchOutcome(0, _result()), as_json=False) == 0
    out, err = capsys.readouterr()
    assert out.startswith("# ddpnet bench: gloo, 2 ranks, cpu") and err == ""


def test_report_of_the_local_parent_prints_no_result(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert report(BenchOutcome(2, notes=("rank 1: boom",)), as_json=True) == 2
    assert capsys.readouterr() == ("", "rank 1: boom\n")
    assert report(BenchOutcome(0), as_json=True) == 0
    assert capsys.readouterr() == ("", "")


NO_GPU = pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="this node has a CUDA device")


@NO_GPU
def test_nccl_without_a_gpu_fails_before_any_rank_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one pre-flight (process_group.check_possible_here) runs in the --local parent: no
    rank is spawned to fail the same way."""
    def spawn(*_: object, **__: object) -> None:
        raise AssertionError("a rank was started")

    monkeypatch.setattr("ddpnet.bench.command.LocalRanks", spawn)
    with pytest.raises(ConfigError, match="backend 'nccl' requested but no CUDA device"):
        run(replace(OPTIONS, backend="nccl"))


@NO_GPU
@pytest.mark.parametrize("command", ["bench", "check"])
def test_nccl_without_a_gpu_is_a_json_error_on_stdout(command: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "ddpnet", command, "--local", "2",
                           "--backend", "nccl", "--json"], capture_output=True, text=True,
                          env=clean_environ(), timeout=120)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    error = json.loads(proc.stdout)["error"]
    assert error["exit_code"] == 2 and "no CUDA device" in error["message"], error
    assert "rank" not in proc.stderr, proc.stderr  # no rank ran
