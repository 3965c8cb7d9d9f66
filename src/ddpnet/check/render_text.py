"""Human rendering of a :class:`CheckReport` with rich: root cause first, then the rest."""

from __future__ import annotations

from typing import Any

from ddpnet.check.report import CheckReport

#: above this many ranks the terminal shows summaries, not N x N tables
TABLE_MAX = 32
_MESH_STYLE = {"ok": "green", "self": "dim", "refused": "red", "filtered": "red",
               "no-route": "red", "?": "yellow"}


def _doctor(summary: Any) -> str:
    if not isinstance(summary, dict):
        return ""
    failed = summary.get("failed") or []
    return "ok" if not failed else "fail: " + ", ".join(map(str, failed))


def render(report: CheckReport, console: Any) -> None:
    from rich.table import Table
    from rich.text import Text

    verdict = report.verdict
    color = "green" if verdict == "pass" else "red"
    warn = [c for c in report.sorted_causes if c.severity == "warn"]
    head = Text(f"ddpnet check: {verdict.upper()}", style=f"bold {color}")
    head.append(f"  ({report.world_size} ranks, master {report.master}, "
                f"{report.timings.get('total', 0):.1f} s)", style="default")
    console.print(head)
    root = report.root
    if root is not None:
        where = []
        if root.hosts:
            where.append("hosts " + ", ".join(root.hosts))
        if root.ranks:
            where.append("ranks " + ", ".join(map(str, root.ranks)))
        title = "ROOT CAUSE" if root.severity == "fail" else "WARNING"
        style = color if root.severity == "fail" else "yellow"
        body = Text()
        body.append(f"{title}: {root.id}", style=f"bold {style}")
        body.append(f"  [{root.stage}] " + "; ".join(where))
        console.print(body)
        console.print(Text("  seen: ", style="bold") + Text(root.detail))
        console.print(Text("  fix:  ", style="bold") + Text(root.fix))
    others = [c for c in report.sorted_causes if c is not root]
    if others:
        console.print("[bold]Other findings[/]")
        for c in others:
            tag = "[red]FAIL[/]" if c.severity == "fail" else "[yellow]WARN[/]"
            console.print(f"  {tag} {c.id}: {c.detail}", markup=True, highlight=False)
            console.print(f"       fix: {c.fix}", markup=False)
    elif not report.causes:
        console.print("[green]every stage passed[/]" + (f"; {len(warn)} warnings" if warn
                                                        else ""))
    if report.stages:
        console.print("stages: " + ", ".join(f"{k} {v} ({report.timings.get(k, 0):.1f} s)"
                                              for k, v in report.stages.items()))
    if report.nodes:
        table = Table(title="nodes", header_style="bold")
        for col in ("rank", "host", "address", "interface", "mtu", "torch", "python",
                    "clock", "doctor"):
            table.add_column(col)
        for n in report.nodes:
            off = n.get("clock_offset_s")
            table.add_row(str(n.get("rank")), str(n.get("host")), str(n.get("address")),
                          str(n.get("interface")), str(n.get("mtu", "")),
                          str(n.get("torch", "")), str(n.get("python", "")),
                          f"{off:+.3f} s" if isinstance(off, (int, float)) else "",
                          _doctor(n.get("doctor")))
        console.print(table)
    if len(report.reachability) > TABLE_MAX or len(report.bandwidth_gbps) > TABLE_MAX:
        size = report.world_size
        bad = sum(s not in ("ok", "self") for row in report.reachability for s in row)
        console.print(f"reachability: {size * (size - 1) - bad} of {size * (size - 1)} links ok "
                      f"(matrices above {TABLE_MAX} ranks: --json or --report)")
    elif report.reachability:
        table = Table(title="reachability (row connects to column)", header_style="bold")
        table.add_column("from\\to")
        for j in range(len(report.reachability)):
            table.add_column(str(j))
        for i, row in enumerate(report.reachability):
            table.add_row(str(i), *[f"[{_MESH_STYLE.get(s, 'default')}]{s}[/]" for s in row])
        console.print(table)
    if report.bandwidth_gbps and len(report.bandwidth_gbps) <= TABLE_MAX:
        table = Table(title="bandwidth Gb/s (row sends to column)", header_style="bold")
        table.add_column("from\\to")
        for j in range(len(report.bandwidth_gbps)):
            table.add_column(str(j), justify="right")
        slow = {(i, j) for c in report.causes if c.id in ("slow-link", "slow-node")
                for i in range(len(report.bandwidth_gbps)) for j in c.ranks}
        for i, bw_row in enumerate(report.bandwidth_gbps):
            cells = []
            for j, v in enumerate(bw_row):
                if v is None:
                    cells.append("-" if i == j else "[yellow]?[/]")
                else:
                    style = "yellow" if (i, j) in slow or (j, i) in slow else "default"
                    cells.append(f"[{style}]{v:.2f}[/]")
            table.add_row(str(i), *cells)
        console.print(table)
    if report.allreduce:
        a = report.allreduce
        console.print(f"all_reduce: {'ok' if a.get('ok') else 'FAILED'} on "
                      f"{a.get('ranks_ok')}/{report.world_size} ranks, backend "
                      f"{a.get('backend')}")
    if report.bench:
        rows = [r for r in report.bench.get("rows", []) if isinstance(r, dict)]
        if "error" in report.bench:
            console.print(f"bench: failed: {report.bench['error']}", markup=False)
        elif rows:
            best = max(rows, key=lambda r: float(r.get("busbw_gbps") or 0))
            link = report.bench.get("measured_link_gbps")
            console.print(f"bench: all_reduce busbw up to {float(best.get('busbw_gbps') or 0):.2f}"
                          f" Gb/s at {int(best.get('bytes') or 0) >> 20} MiB"
                          + (f" (slowest link {float(link):.2f} Gb/s)" if link else ""))
