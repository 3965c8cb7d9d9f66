"""The shared edge runner: bounded, stdin closed, None for an absent or hung tool."""

from __future__ import annotations

import time

from ddpnet.subproc import CommandOutput, run_command


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
