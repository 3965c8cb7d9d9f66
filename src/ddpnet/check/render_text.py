"""Human rendering of a check with rich: rank 0's report root cause first, then the rest;
another rank's one line; the progress lines rank 0 prints on stderr while it runs."""

from __future__ import annotations

import sys
from typing import Any

from ddpnet.check.report import CheckReport
from ddpnet.check.result import CheckResult

#: above this many ranks the terminal shows summaries, not N x N tables
TABLE_MAX = 32
_MESH_STYLE = {"ok": "green", "self": "dim", "refused": "red", "filtered": "red",
               "no-route": "red", "?": "yellow"}


def doctor_cell(summary: Any) -> str:
    """A node's doctor summary in one cell (text and HTML tables)."""
    if not isinstance(summary, dict):
        return ""
    failed = summary.get("failed") or []
    shown = "pass" if not failed else "fail: " + ", ".join(map(str, failed))
    judged = summary.get("judged") or {}
    # what check judged itself across the nodes: the cause it is, or pass (one fact, one verdict)
    return shown + "".join(f"; {k}: {v}" for k, v in judged.items())


def progress_line(message: str) -> None:
    """Rank 0's ``[check] ...`` progress on stderr (beside --json's stdout)."""
    sys.stderr.write(f"[check] {message}\n")
    sys.stderr.flush()


def render_result(result: CheckResult, console: Any) -> None:
    """What ``ddpnet check`` prints without --json: a failure to join as the error line, the
    ``--local`` workers' lines on stderr, then the report (or this rank's one line)."""
    from ddpnet.output import print_error

    if result.failure is not None:
        print_error(result.failure)
        return
    for w in result.workers:
        sys.stderr.write(f"[exit {w.code}] {w.line}\n")
    sys.stderr.flush()
    report = result.report
    if report is None:
        assert result.outcome is not None
        console.out(result.outcome.line, highlight=False)
        return
    render(report, console)
    if result.report_path is not None:
        console.out(f"report: {result.report_path}", highlight=False)


def render(report: CheckReport, console: Any) -> None:
    """The whole report: verdict, root cause, other findings, then the tables."""
    for section in (_head, _root, _others, _stages, _nodes, _reachability, _bandwidth,
                    _notes, _allreduce, _bench):
        section(report, console)


def _head(report: CheckReport, console: Any) -> None:
    from rich.text import Text

    verdict = report.verdict
    color = "green" if verdict == "pass" else "red"
    head = Text(f"ddpnet check: {verdict.upper()}", style=f"bold {color}")
    head.append(f"  ({report.world_size} ranks, master {report.master}, "
                f"{report.timings.get('total', 0):.1f} s)", style="default")
    console.print(head)


def _root(report: CheckReport, console: Any) -> None:
    from rich.text import Text

    root = report.root
    if root is None:
        return
    where = []
    if root.hosts:
        where.append("hosts " + ", ".join(root.hosts))
    if root.ranks:
        where.append("ranks " + ", ".join(map(str, root.ranks)))
    title = "ROOT CAUSE" if root.severity == "fail" else "WARNING"
    # a failing root cause makes the verdict fail: red
    style = "red" if root.severity == "fail" else "yellow"
    body = Text()
    body.append(f"{title}: {root.id}", style=f"bold {style}")
    body.append(f"  [{root.stage}] " + "; ".join(where))
    console.print(body)
    console.print(Text("  seen: ", style="bold") + Text(root.detail))
    console.print(Text("  fix:  ", style="bold") + Text(root.fix))
    _evidence(root, console, "  ")


def _evidence(cause: Any, console: Any, indent: str) -> None:
    from rich.text import Text

    for label, text in cause.shown_evidence():
        console.print(Text(f"{indent}{label}: ", style="dim") + Text(text))


def _others(report: CheckReport, console: Any) -> None:
    others = [c for c in report.sorted_causes if c is not report.root]
    if others:
        console.print("[bold]Other findings[/]")
        for c in others:
            tag = "[red]FAIL[/]" if c.severity == "fail" else "[yellow]WARN[/]"
            console.print(f"  {tag} {c.id}: {c.detail}", markup=True, highlight=False)
            console.print(f"       fix: {c.fix}", markup=False)
            _evidence(c, console, "       ")
    elif not report.causes:
        console.print("[green]every stage passed[/]")


def _stages(report: CheckReport, console: Any) -> None:
    if report.stages:
        console.print("stages: " + ", ".join(f"{k} {v} ({report.timings.get(k, 0):.1f} s)"
                                              for k, v in report.stages.items()))


def _nodes(report: CheckReport, console: Any) -> None:
    from ddpnet.output import table as new_table

    if not report.nodes:
        return
    table = new_table("nodes")
    for col in ("rank", "host", "address", "interface", "mtu", "torch", "python",
                "clock", "doctor"):
        table.add_column(col)
    for n in report.nodes:
        off = n.get("clock_offset_s")
        table.add_row(str(n.get("rank")), str(n.get("host")), str(n.get("address")),
                      _interface(n), str(n.get("mtu", "")),
                      str(n.get("torch", "")), str(n.get("python", "")),
                      f"{off:+.3f} s" if isinstance(off, (int, float)) else "",
                      doctor_cell(n.get("doctor")))
    console.print(table)


def _interface(node: dict[str, Any]) -> str:
    """The interface and who chose it (auto, or the variable that set it)."""
    why = node.get("interface_why")
    source = why.get("source") if isinstance(why, dict) else None
    return f"{node.get('interface')} ({source})" if source else str(node.get("interface"))


def _too_big(report: CheckReport) -> bool:
    return max(len(report.reachability), len(report.bandwidth_gbps),
               len(report.rtt_ms)) > TABLE_MAX


def _reachability(report: CheckReport, console: Any) -> None:
    from ddpnet.output import table as new_table

    if _too_big(report):
        size = report.world_size
        bad = sum(s not in ("ok", "self") for row in report.reachability for s in row)
        console.print(f"reachability: {size * (size - 1) - bad} of {size * (size - 1)} links ok "
                      f"(matrices above {TABLE_MAX} ranks: --json or --report)")
    elif report.reachability:
        table = new_table("reachability (row connects to column)")
        table.add_column("from\\to")
        for j in range(len(report.reachability)):
            table.add_column(str(j))
        for i, row in enumerate(report.reachability):
            table.add_row(str(i), *[f"[{_MESH_STYLE.get(s, 'default')}]{s}[/]" for s in row])
        console.print(table)


def rtt_text(ms: float | None) -> str:
    """A round trip as the matrices show it (ms): two decimals below 10 ms (a LAN's are
    tens of microseconds), fewer above."""
    if ms is None:
        return "?"
    return f"{ms:.2f}" if ms < 10 else f"{ms:.1f}" if ms < 100 else f"{ms:.0f}"


def _at(matrix: tuple[tuple[float | None, ...], ...], i: int, j: int) -> float | None:
    return matrix[i][j] if i < len(matrix) and j < len(matrix[i]) else None


def _link_cell(report: CheckReport, i: int, j: int, marked: set[tuple[int, int]]) -> str:
    """``Gb/s · ms`` of one link, each where measured, yellow when a cause names it."""
    if i == j:
        return "-"
    parts = []
    if report.bandwidth_gbps:
        v = _at(report.bandwidth_gbps, i, j)
        parts.append("?" if v is None else f"{v:.2f}")
    if report.rtt_ms:
        parts.append(rtt_text(_at(report.rtt_ms, i, j)))
    text = " · ".join(parts)
    unknown = all(p == "?" for p in parts)
    style = "yellow" if unknown or (i, j) in marked or (j, i) in marked else "default"
    return f"[{style}]{text}[/]"


#: the causes whose ranks the link matrix marks
_LINK_CAUSES = ("slow-link", "slow-node", "high-latency")


def _bandwidth(report: CheckReport, console: Any) -> None:
    """The links: Gb/s each way (the tournament) and the round trip (the mesh's connect),
    side by side in one matrix."""
    from ddpnet.output import table as new_table

    bw, rtt = report.bandwidth_gbps, report.rtt_ms
    n = max(len(bw), len(rtt))
    if not n or n > TABLE_MAX:
        return
    what = " · ".join(w for w, on in (("bandwidth Gb/s", bw), ("round trip ms", rtt)) if on)
    table = new_table(f"{what} (row {'sends' if bw else 'connects'} to column)")
    table.add_column("from\\to")
    for j in range(n):
        table.add_column(str(j), justify="right")
    marked = {(i, j) for c in report.causes if c.id in _LINK_CAUSES
              for i in range(n) for j in c.ranks}
    for i in range(n):
        table.add_row(str(i), *[_link_cell(report, i, j, marked) for j in range(n)])
    console.print(table)


def _notes(report: CheckReport, console: Any) -> None:
    for note in report.notes:
        console.print(f"note: {note}", markup=False, highlight=False)


def _allreduce(report: CheckReport, console: Any) -> None:
    if report.allreduce:
        a = report.allreduce
        console.print(f"all_reduce: {'ok' if a.get('ok') else 'FAILED'} on "
                      f"{a.get('ranks_ok')}/{report.world_size} ranks, backend "
                      f"{a.get('backend')}")


def _bench(report: CheckReport, console: Any) -> None:
    if not report.bench:
        return
    rows = [r for r in report.bench.get("rows", []) if isinstance(r, dict)]
    if "error" in report.bench:
        console.print(f"bench: failed: {report.bench['error']}", markup=False)
    elif rows:
        best = max(rows, key=lambda r: float(r.get("busbw_gbps") or 0))
        link = report.bench.get("measured_link_gbps")
        console.print(f"bench: all_reduce busbw up to {float(best.get('busbw_gbps') or 0):.2f}"
                      f" Gb/s at {int(best.get('bytes') or 0) >> 20} MiB"
                      + (f" (slowest link {float(link):.2f} Gb/s)" if link else ""))
