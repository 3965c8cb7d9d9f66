"""One self-contained HTML file: inline CSS and SVG, no scripts, no network (pure)."""

from __future__ import annotations

import html
import json
import statistics
from collections.abc import Sequence
from typing import Any

from ddpnet.check.report import CheckReport

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1b1f24}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:26px 0 8px}
.pass{color:#1a7f37}.fail{color:#cf222e}.warn{color:#9a6700}
.root{border:2px solid #cf222e;border-radius:6px;padding:10px 14px;max-width:980px}
.root.warn{border-color:#bf8700}
.cause{margin:6px 0;padding:6px 10px;border-left:4px solid #ccc;max-width:980px}
.cause.fail{border-color:#cf222e}.cause.warn{border-color:#bf8700}
code{background:#f3f4f6;padding:1px 4px;border-radius:3px;white-space:pre-wrap}
table{border-collapse:collapse;margin:4px 0}
th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:center}
td.l{text-align:left} .muted{color:#6e7781}
.hm td{min-width:58px;font-variant-numeric:tabular-nums}
"""

_MESH_COLOR = {"ok": "#2da44e", "self": "#eaeef2", "refused": "#cf222e",
               "filtered": "#a40e26", "no-route": "#fa4549", "?": "#d4a72c"}


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _heat(value: float, median: float) -> str:
    """Green at or above the median, through amber at the slow limit (0.7 x median), to red
    below it, as an rgb() string: a uniform cluster looks uniformly green."""
    ratio = value / median if median > 0 else 1.0
    frac = max(0.0, min(1.0, (ratio - 0.5) / 0.5))
    r = int(207 + (45 - 207) * frac)
    g = int(34 + (164 - 34) * frac)
    b = int(46 + (78 - 46) * frac)
    return f"rgb({r},{g},{b})"


#: above this many ranks the heatmaps give way to lists of the failing pairs / slowest links
HEATMAP_MAX = 64


def _mesh_table(matrix: Sequence[Sequence[str]]) -> str:
    n = len(matrix)
    if n > HEATMAP_MAX:
        bad = [(i, j, s) for i, row in enumerate(matrix) for j, s in enumerate(row)
               if s not in ("ok", "self")]
        return (f"<p id='reachability'>{n * (n - 1) - len(bad)} of {n * (n - 1)} links ok."
                + "".join(f"<br>{i} &#8594; {j}: {_e(s)}" for i, j, s in bad[:500]) + "</p>")
    rows = ["<table class='hm' id='reachability'><tr><th>from \\ to</th>"
            + "".join(f"<th>{j}</th>" for j in range(n)) + "</tr>"]
    for i, row in enumerate(matrix):
        cells = "".join(
            f"<td style='background:{_MESH_COLOR.get(s, '#d4a72c')};"
            f"color:{'#1b1f24' if s in ('self', '?') else '#fff'}' title='{i}->{j}: {_e(s)}'>"
            f"{_e(s)}</td>" for j, s in enumerate(row))
        rows.append(f"<tr><th>{i}</th>{cells}</tr>")
    return "".join(rows) + "</table>"


#: a same-host link: measured, shown, not judged (loopback measures CPUs, not a network)
_SAME_HOST = "#eaeef2"


def same_host_links(report: CheckReport) -> set[tuple[int, int]]:
    """The links between ranks of one host, as the bandwidth stage leaves them unjudged
    (``tournament.cross_nic``): the heatmap shows them neutral, not slow."""
    from ddpnet.check.tournament import same_host

    address = {n.get("rank"): str(n.get("address") or "") for n in report.nodes}
    n = len(report.bandwidth_gbps)
    return {(i, j) for i in range(n) for j in range(n)
            if i != j and i in address and j in address and same_host(address[i], address[j])}


def _bw_cell(v: float | None, i: int, j: int, median: float, same: set[tuple[int, int]]) -> str:
    if v is None:
        return f"<td style='background:{_SAME_HOST}'>" + ("-" if i == j else "?") + "</td>"
    if (i, j) in same:
        return (f"<td style='background:{_SAME_HOST};color:#1b1f24' title='{i}->{j}: "
                f"{v:.3f} Gb/s, same host (loopback): not judged'>{v:.2f}</td>")
    return (f"<td style='background:{_heat(v, median)};color:#fff' "
            f"title='{i}->{j}: {v:.3f} Gb/s'>{v:.2f}</td>")


def _judged_median(matrix: Sequence[Sequence[float | None]],
                   same: set[tuple[int, int]]) -> tuple[list[float], float]:
    """Every measured value, and the median of the links that cross a NIC (1.0 if none)."""
    vals = [v for row in matrix for v in row if v is not None]
    judged = [v for i, row in enumerate(matrix) for j, v in enumerate(row)
              if v is not None and (i, j) not in same]
    return vals, statistics.median(judged) if judged else 1.0


def _bw_table(matrix: Sequence[Sequence[float | None]], same: set[tuple[int, int]]) -> str:
    vals, median = _judged_median(matrix, same)
    n = len(matrix)
    if n > HEATMAP_MAX:
        return (f"<p id='bandwidth'>{len(vals)} links, median {median:.2f} Gb/s; the chart "
                "below lists the slowest.</p>")
    rows = ["<table class='hm' id='bandwidth'><tr><th>from \\ to</th>"
            + "".join(f"<th>{j}</th>" for j in range(n)) + "</tr>"]
    for i, row in enumerate(matrix):
        cells = "".join(_bw_cell(v, i, j, median, same) for j, v in enumerate(row))
        rows.append(f"<tr><th>{i}</th>{cells}</tr>")
    note = ("<p class='muted'>grey: ranks of one host, over loopback (CPU contention, not the "
            "network): not judged</p>" if same & {(i, j) for i, row in enumerate(matrix)
                                                  for j, v in enumerate(row) if v is not None}
            else "")
    return "".join(rows) + "</table>" + note


def _bw_chart(matrix: Sequence[Sequence[float | None]], same: set[tuple[int, int]]) -> str:
    """Horizontal bars, one per link, sorted slowest first (inline SVG); same-host links
    neutral."""
    links = sorted(((float(v), i, j) for i, row in enumerate(matrix) for j, v in enumerate(row)
                    if v is not None), key=lambda t: t[0])
    if not links:
        return "<p class='muted'>no bandwidth measured</p>"
    shown = links[:64]
    hi = max(v for v, _, _ in links) or 1.0
    _, median = _judged_median(matrix, same)
    bar_h, left, width = 16, 70, 520
    height = bar_h * len(shown) + 30
    parts = [f"<svg id='bandwidth-chart' xmlns='http://www.w3.org/2000/svg' "
             f"width='{left + width + 90}' "
             f"height='{height}' role='img' aria-label='per-link bandwidth'>"]
    for k, (v, i, j) in enumerate(shown):
        y = k * bar_h + 4
        w = max(1.0, width * v / hi)
        parts.append(f"<text x='{left - 6}' y='{y + 12}' font-size='11' text-anchor='end'>"
                     f"{i}&#8594;{j}</text>")
        parts.append(f"<rect x='{left}' y='{y}' width='{w:.1f}' height='{bar_h - 3}' "
                     f"fill='{_SAME_HOST if (i, j) in same else _heat(v, median)}'><title>"
                     f"{i}->{j} {v:.3f} Gb/s" + (" (same host)" if (i, j) in same else "")
                     + "</title></rect>")
        parts.append(f"<text x='{left + w + 4:.1f}' y='{y + 12}' font-size='11'>{v:.2f} Gb/s"
                     "</text>")
    axis_y = bar_h * len(shown) + 20
    parts.append(f"<text x='{left}' y='{axis_y}' font-size='11' fill='#6e7781'>slowest first"
                 + (f" ({len(links) - len(shown)} faster links not shown)"
                    if len(links) > len(shown) else "") + "</text></svg>")
    return "".join(parts)


def _rtt_table(matrix: Sequence[Sequence[float | None]]) -> str:
    """The round trips, coloured against their median (a high one red), as a heatmap like
    the bandwidth's; a summary above HEATMAP_MAX ranks."""
    from ddpnet.check.render_text import rtt_text

    vals = [v for row in matrix for v in row if v is not None]
    median = statistics.median(vals) if vals else 1.0
    n = len(matrix)
    if n > HEATMAP_MAX:
        return (f"<p id='rtt'>{len(vals)} round trips, median {rtt_text(median)} ms, "
                f"highest {rtt_text(max(vals, default=None))} ms.</p>")
    rows = ["<table class='hm' id='rtt'><tr><th>from \\ to</th>"
            + "".join(f"<th>{j}</th>" for j in range(n)) + "</tr>"]
    for i, row in enumerate(matrix):
        cells = "".join(
            f"<td style='background:{_SAME_HOST}'>" + ("-" if i == j else "?") + "</td>"
            if v is None else
            f"<td style='background:{_heat(median, max(v, 1e-6))};color:#fff' "
            f"title='{i}->{j}: {v:.3f} ms'>{rtt_text(v)}</td>" for j, v in enumerate(row))
        rows.append(f"<tr><th>{i}</th>{cells}</tr>")
    return "".join(rows) + "</table>"


def _cell(value: Any) -> Any:
    if isinstance(value, dict) and "verdict" in value:  # the doctor's summary
        from ddpnet.check.render_text import doctor_cell

        return doctor_cell(value)
    return f"{value:+.3f}" if isinstance(value, float) else value


def _cause(c: Any, cls: str) -> str:
    where = []
    if c.hosts:
        where.append("hosts: " + ", ".join(_e(h) for h in c.hosts))
    if c.ranks:
        where.append("ranks: " + ", ".join(str(r) for r in c.ranks))
    return (f"<div class='{cls} {c.severity}'><b class='{c.severity}'>{_e(c.id)}</b> "
            f"<span class='muted'>[{_e(c.stage)}] {' · '.join(where)}</span><br>"
            f"{_e(c.detail)}<br><b>fix:</b> <code>{_e(c.fix)}</code>{_evidence(c)}</div>")


def _evidence(c: Any) -> str:
    """The cause's evidence rows as a list (the same rows the text renderer shows)."""
    rows = c.shown_evidence()
    if not rows:
        return ""
    return "<ul class='ev'>" + "".join(
        f"<li><span class='muted'>{_e(label)}:</span> "
        + (f"<code>{_e(text)}</code>" if label == "see it yourself" else _e(text)) + "</li>"
        for label, text in rows) + "</ul>"


def render_html(report: CheckReport) -> str:
    data = report.to_dict()
    v = report.verdict
    out = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
           "<meta name='viewport' content='width=device-width,initial-scale=1'>",
           f"<title>ddpnet check: {v}</title><style>{_CSS}</style></head><body>",
           f"<h1>ddpnet check: <span id='verdict' class='{v}'>{v.upper()}</span></h1>",
           f"<p class='muted'>{report.world_size} ranks · master {_e(report.master)} · "
           f"{report.timings.get('total', 0):.1f} s</p>"]
    out += _causes_html(report)
    out += _tables_html(report)
    out.append("<h2>Raw result</h2><details><summary>JSON</summary><pre id='json'>"
               + _e(json.dumps(data, indent=1, default=str)) + "</pre></details>")
    out.append("</body></html>\n")
    return "".join(out)


def _causes_html(report: CheckReport) -> list[str]:
    out = []
    root = report.root
    if root is not None:
        out.append("<h2>Root cause</h2>" if root.severity == "fail" else "<h2>Warning</h2>")
        out.append(_cause(root, "root"))
    rest = [c for c in report.sorted_causes if c is not root]
    if rest:
        out.append("<h2>Other findings</h2>" + "".join(_cause(c, "cause") for c in rest))
    if not report.causes:
        out.append("<p class='pass'>Every stage passed.</p>")
    if report.stages:
        out.append("<h2>Stages</h2><table><tr><th>stage</th><th>result</th><th>seconds</th></tr>"
                   + "".join(f"<tr><td class='l'>{_e(k)}</td><td class='{_e(s)}'>{_e(s)}</td>"
                             f"<td>{report.timings.get(k, 0):.2f}</td></tr>"
                             for k, s in report.stages.items()) + "</table>")
    return out


#: the node table's headers where a fact's key is not a label
_LABELS = {"clock_offset_s": "clock offset (s)"}


def _nodes_html(report: CheckReport) -> list[str]:
    from ddpnet.check.nics import node_why

    cols = ("rank", "host", "address", "interface", "mtu", "subnet", "torch", "python",
            "cuda", "clock_offset_s", "doctor", "plain_job", "why this interface")
    out = ["<h2>Nodes</h2><table id='nodes'><tr>"
           + "".join(f"<th>{_LABELS.get(c, c)}</th>" for c in cols) + "</tr>"]
    for n in report.nodes:
        out.append("<tr>" + "".join(
            f"<td class='l'>{_e(node_why(n) if c == cols[-1] else _cell(n.get(c)))}</td>"
            for c in cols) + "</tr>")
    out.append("</table>")
    return out


def _tables_html(report: CheckReport) -> list[str]:
    out = _nodes_html(report) if report.nodes else []
    if report.reachability:
        out.append("<h2>Reachability (row connects to column)</h2>"
                   + _mesh_table(report.reachability))
    if report.bandwidth_gbps:
        same = same_host_links(report)
        out.append("<h2>Bandwidth, Gb/s (row sends to column)</h2>"
                   + _bw_table(report.bandwidth_gbps, same))
        out.append("<h2>Per-link bandwidth</h2>" + _bw_chart(report.bandwidth_gbps, same))
    if report.rtt_ms:
        out.append("<h2>Round trip, ms (row connects to column)</h2>"
                   + _rtt_table(report.rtt_ms))
    if report.networks:
        out.append(_networks_html(report.networks))
    if report.allreduce:
        a = report.allreduce
        out.append(f"<h2>Process group</h2><p>all_reduce {'ok' if a.get('ok') else 'FAILED'} "
                   f"on {_e(a.get('ranks_ok'))}/{report.world_size} ranks, backend "
                   f"{_e(a.get('backend'))}</p>")
    if report.bench:
        out.append("<h2>Collective bench</h2><pre>"
                   + _e(json.dumps(report.bench, indent=1, default=str)[:20000]) + "</pre>")
    return out


def _networks_html(rows: Sequence[Any]) -> str:
    """The networks every host shares and what one stream measured over each."""
    cols = ("subnet", "interfaces", "nominal", "job", "gbps")
    return ("<h2>Networks between the hosts</h2><table id='networks'><tr>"
            + "".join(f"<th>{c}</th>" for c in cols) + "</tr>"
            + "".join("<tr>" + "".join(f"<td class='l'>{_e(_cell(r.get(c)))}</td>"
                                       for c in cols) + "</tr>" for r in rows)
            + "</table>")
