"""The human doctor table: statuses as in the JSON, fixes after it one line each, the verdict
line with counts."""

from __future__ import annotations

import io

from rich.console import Console

from ddpnet.doctor.base import CheckResult
from ddpnet.doctor.render import render, verdict_line
from ddpnet.doctor.run import DoctorReport
from ddpnet.output import console


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
    assert "fix for firewall.master_port: open 29500/tcp to the cluster" in text
    assert "rule 3" in text            # a failure's detail is always shown
    assert "4 MiB" not in text         # a warning's detail only with --verbose
    assert "4 MiB" in _text(_report(), verbose=True)


def test_verdict_line_counts_each_status() -> None:
    assert verdict_line(_report()) == "[bold red]verdict: fail[/] (1 pass, 1 warn, 1 fail) in 1.50 s"


def test_exit_code_follows_the_verdict() -> None:
    assert _report("fail").exit_code == 1
    assert _report("warn").exit_code == 0


def test_statuses_read_as_in_the_json_and_verdict() -> None:
    text = _text(_report())
    rows = {line.split("│")[2].strip(): line.split("│")[3].strip()
            for line in text.splitlines() if line.count("│") == 5 and line.split("│")[2].strip()}
    assert rows == {"hostname": "pass", "master_port": "fail", "rmem": "warn"}
    assert "(1 pass, 1 warn, 1 fail)" in text
    assert " ok " not in text and "FAIL" not in text


def test_a_long_fix_stays_on_one_line_at_80_columns() -> None:
    fix = ("sysctl -w net.ipv4.tcp_max_syn_backlog=8192 ; persist: 'net.ipv4.tcp_max_syn_backlog"
           " = 8192' in /etc/sysctl.d/90-ddpnet.conf (ddpnet tune does both)")
    checks = (CheckResult("sysctl.net.ipv4.tcp_max_syn_backlog", "sysctl", "warn",
                          "net.ipv4.tcp_max_syn_backlog = 2048, want at least 8192", "", fix),)
    buf = io.StringIO()
    render(DoctorReport("warn", checks, {"hostname": "n"}, 1.0), console(buf, width=80))
    text = buf.getvalue()
    assert f"fix for sysctl.net.ipv4.tcp_max_syn_backlog: {fix}\n" in text
    assert "│ net.ipv4.tcp_max_syn_backlog │" in text and "…" not in text
