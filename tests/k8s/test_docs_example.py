"""The examples in docs/k8s.md are the command's real output today."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from tests.conftest import RunCli

DOC = Path(__file__).resolve().parents[2] / "docs" / "k8s.md"
EXAMPLE = re.compile(r"^```\n\$ (ddpnet k8s [^\n]*)\n```\n\n```yaml\n(.*?)^```", re.M | re.S)


def test_the_examples_are_what_the_command_prints(run_cli: RunCli) -> None:
    examples = EXAMPLE.findall(DOC.read_text(encoding="utf-8"))
    assert len(examples) == 2
    for command, text in examples:
        proc = run_cli(*shlex.split(command)[1:])
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == text, command
