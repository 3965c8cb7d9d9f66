"""The human ``ddpnet doctor`` table (pure: a report and a console in, nothing read).

Statuses read as in the JSON (pass, warn, fail, skip); fixes follow the table, one line each,
so a command is never wrapped inside a table cell and can be pasted as printed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddpnet.doctor.run import DoctorReport

if TYPE_CHECKING:
    from rich.console import Console

_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


def render(report: DoctorReport, out: Console, verbose: bool = False) -> None:
    """A table grouped by family, then the fix of every warn/fail row, then the verdict."""
    from rich.markup import escape

    from ddpnet.output import table

    host = report.facts.get("hostname", "")
    rows = table(f"ddpnet doctor — {host}", ("family", "check", "status", "summary"))
    family = None
    for r in report.checks:
        if r.family != family and family is not None:
            rows.add_section()
        shown_family = r.family if r.family != family else ""
        family = r.family
        style = _STYLE[r.status]
        rows.add_row(shown_family, r.id.split(".", 1)[1], f"[{style}]{r.status}[/]",
                     escape(r.summary))
        if r.detail and (verbose or r.status == "fail"):
            rows.add_row("", "", "", f"[dim]{escape(r.detail)}[/]")
    out.print(rows)
    for r in report.checks:
        if r.fix and (r.status in ("warn", "fail") or verbose):
            out.print(f"[cyan]fix[/] for {r.id}: {escape(r.fix)}")
    out.print(verdict_line(report))


def verdict_line(report: DoctorReport) -> str:
    """``verdict: fail (12 pass, 1 fail...)`` with the counts per status and the time taken."""
    counts = {s: sum(1 for r in report.checks if r.status == s) for s in _STYLE}
    tally = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    style = _STYLE[report.verdict]
    return f"[{style}]verdict: {report.verdict}[/] ({tally}) in {report.elapsed_s:.2f} s"
