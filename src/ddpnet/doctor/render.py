"""The human ``ddpnet doctor`` table (pure: a report and a console in, nothing read)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddpnet.doctor.run import DoctorReport

if TYPE_CHECKING:
    from rich.console import Console

_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}
_MARK = {"pass": "ok", "warn": "warn", "fail": "FAIL", "skip": "skip"}


def render(report: DoctorReport, out: Console, verbose: bool = False) -> None:
    """A table grouped by family; the fix under every warn/fail row; one verdict line."""
    from rich.markup import escape
    from rich.table import Table

    host = report.facts.get("hostname", "")
    table = Table(title=f"ddpnet doctor — {host}", show_header=True, header_style="bold",
                  expand=False)
    for col in ("family", "check", "status"):
        table.add_column(col)
    table.add_column("summary", overflow="fold")
    family = None
    for r in report.checks:
        if r.family != family and family is not None:
            table.add_section()
        shown_family = r.family if r.family != family else ""
        family = r.family
        style = _STYLE[r.status]
        table.add_row(shown_family, r.id.split(".", 1)[1], f"[{style}]{_MARK[r.status]}[/]",
                      escape(r.summary))
        if r.status in ("warn", "fail") or verbose:
            if r.detail and (verbose or r.status == "fail"):
                table.add_row("", "", "", f"[dim]{escape(r.detail)}[/]")
            if r.fix:
                table.add_row("", "", "", f"[cyan]fix:[/] {escape(r.fix)}")
    out.print(table)
    out.print(verdict_line(report))


def verdict_line(report: DoctorReport) -> str:
    """``verdict: fail (12 ok, 1 FAIL...)`` with the counts per status and the time taken."""
    counts = {s: sum(1 for r in report.checks if r.status == s) for s in _MARK}
    tally = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    style = _STYLE[report.verdict]
    return f"[{style}]verdict: {report.verdict}[/] ({tally}) in {report.elapsed_s:.2f} s"
