"""``ddpnet doctor``: check this node for every cause of a hang or a slow job, with fixes."""

from __future__ import annotations

import os

import click

from ddpnet.doctor.run import DoctorReport
from ddpnet.exitcodes import ExitCode

_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}
_MARK = {"pass": "ok", "warn": "warn", "fail": "FAIL", "skip": "skip"}


def render(report: DoctorReport, verbose: bool = False) -> None:
    """A table grouped by family; the fix under every warn/fail row; one verdict line."""
    from rich.markup import escape
    from rich.table import Table

    from ddpnet.output import console

    out = console()
    host = report.facts.get("hostname", "")
    table = Table(title=f"ddpnet doctor — {host}", show_header=True, header_style="bold",
                  expand=False)
    table.add_column("family")
    table.add_column("check")
    table.add_column("status")
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
    counts = {s: sum(1 for r in report.checks if r.status == s) for s in _MARK}
    tally = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    style = _STYLE[report.verdict]
    out.print(f"[{style}]verdict: {report.verdict}[/] ({tally}) in {report.elapsed_s:.2f} s")


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--master-addr", default=None, help="MASTER_ADDR (default: ddpnet env's).")
@click.option("--master-port", default=None, type=click.IntRange(1, 65535),
              help="MASTER_PORT (default: ddpnet env's).")
@click.option("--cluster-subnet", default=None, metavar="CIDR",
              help="Subnet of the cluster (default: the training interface's).")
@click.option("-v", "--verbose", is_flag=True, help="Show detail under every row.")
def command(as_json: bool, master_addr: str | None, master_port: int | None,
            cluster_subnet: str | None, verbose: bool) -> int:
    """Check this node: rendezvous, names, interfaces, firewall, SELinux, sysctls, software,
    RDMA and environment leftovers, each pass/warn/fail with the fix. Exit 1 when any fails.
    """
    from ddpnet.doctor.run import run_doctor

    report = run_doctor(master_addr=master_addr, master_port=master_port,
                        cluster_subnet=cluster_subnet, environ=os.environ)
    if as_json:
        from ddpnet.output import emit_json

        emit_json(report.to_dict())
    else:
        render(report, verbose)
    return int(ExitCode.CHECK_FAILED if report.verdict == "fail" else ExitCode.OK)
