"""The shared edge runner: bounded, stdin closed, None for an absent or hung tool."""

from __future__ import annotations

import time
from pathlib import Path

from ddpnet.subproc import ABSENT_RC, TIMED_OUT_RC, CommandOutput, run_command, run_tool


def test_output_and_status() -> None:
    assert run_command(["sh", "-c", "echo out; echo err >&2; exit 3"], 10) == CommandOutput(
        3, "out\n", "err\n")


def test_absent_tool_is_none() -> None:
    assert run_command(["ddpnet-no-such-tool-qa"], 10) is None


def test_timeout_is_none_and_bounded() -> None:
    started = time.monotonic()
    assert run_command(["sleep", "30"], 0.3) is None
    assert time.monotonic() - started < 10


def test_stdin_is_closed_so_a_prompt_cannot_hang() -> None:
    # `cat` reading our stdin would wait for the test runner's terminal
    assert run_command(["cat"], 10) == CommandOutput(0, "", "")


def test_run_tool_says_absent_with_status_127() -> None:
    out = run_tool(["ddpnet-no-such-tool-qa", "x"], 10)
    assert (out.returncode, out.failure) == (ABSENT_RC, "absent")
    assert out.merged == "ddpnet-no-such-tool-qa: command not found"


def test_run_tool_says_timed_out_with_status_124_and_is_bounded() -> None:
    started = time.monotonic()
    out = run_tool(["sleep", "30"], 0.3)
    assert time.monotonic() - started < 10
    assert (out.returncode, out.failure) == (TIMED_OUT_RC, "timeout")
    assert "timed out after 0.3 s" in out.merged


def test_run_tool_merges_output_for_reports() -> None:
    out = run_tool(["sh", "-c", "echo out; echo err >&2; exit 2"], 10)
    assert (out.returncode, out.failure, out.merged) == (2, "", "out\nerr")


def test_not_executable_is_absent(tmp_path: Path) -> None:
    script = tmp_path / "tool"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o644)
    assert run_command([str(script)], 10) is None
    assert run_tool([str(script)], 10).failure == "absent"
