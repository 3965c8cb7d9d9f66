"""The human doctor table: fixes under failing rows, the verdict line with counts."""

from __future__ import annotations

import io

from rich.console import Console

from ddpnet.doctor.base import CheckResult
from ddpnet.doctor.render import render, verdict_line
from ddpnet.doctor.run import DoctorReport


def _report(verdict: str = "fail") -> DoctorReport:
    checks = (
        CheckResult("names.hostname", "names", "pass", "resolves", "", ""),
        CheckResult("firewall.master_port", "firewall", "fail", "29500 dropped", "rule 3",
                    "open 29500/tcp to the cluster"),
        CheckResult("sysctl.rmem", "sysctl", "warn", "small buffers", "4 MiB", "ddpnet tune"),
    )
    return DoctorReport(verdict, checks, {"hostname": "node7"}, 1.5)


def _text(report: DoctorReport, verbose: bool = False) -> str:
    buf = io.StringIO()
    render(report, Console(file=buf, width=200, color_system=None), verbose=verbose)
    return buf.getvalue()


def test_table_shows_fixes_and_failing_detail() -> None:
    text = _text(_report())
    assert "ddpnet doctor — node7" in text
    assert "FAIL" in text and "fix: open 29500/tcp to the cluster" in text
    assert "rule 3" in text            # a failure's detail is always shown
    assert "4 MiB" not in text         # a warning's detail only with --verbose
    assert "4 MiB" in _text(_report(), verbose=True)


def test_verdict_line_counts_each_status() -> None:
    assert verdict_line(_report()) == "[bold red]verdict: fail[/] (1 pass, 1 warn, 1 fail) in 1.50 s"


def test_exit_code_follows_the_verdict() -> None:
    assert _report("fail").exit_code == 1
    assert _report("warn").exit_code == 0
