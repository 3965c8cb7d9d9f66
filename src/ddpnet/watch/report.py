"""The watch report: one screen of text for rank 0's stderr (and ``ddpnet diagnose``), the
same as a JSON object and a self-contained HTML page (pure)."""

from __future__ import annotations

import html
import time
from collections.abc import Sequence
from typing import Any

from ddpnet.watch.desync import describe
from ddpnet.watch.state import Diagnosis, RankState, Snapshot

#: ranks shown in the table of one screen (the JSON has them all)
_ROWS = 16


def report_dict(diagnosis: Diagnosis, snapshot: Snapshot, trigger: str,
                warnings: Sequence[Diagnosis] = ()) -> dict[str, Any]:
    """``warnings``: what the hub warned about before (stragglers), oldest first."""
    return {"kind": diagnosis.kind, "trigger": trigger, "diagnosis": diagnosis.to_dict(),
            "snapshot": snapshot.to_dict(), "warnings": [w.to_dict() for w in warnings]}


def warning_line(diagnosis: Diagnosis) -> str:
    """One line on rank 0's stderr for a cause that is no hang (a straggler): the summary
    and its first evidence."""
    evidence = f" ({diagnosis.evidence[0]})" if diagnosis.evidence else ""
    return f"ddpnet: watch: warning: {diagnosis.kind}: {diagnosis.summary}{evidence}"


def _row(snapshot: Snapshot, rank: int, width: int = 14) -> str:
    """One rank's row; ``width``: the host column (a host name is never cut)."""
    state, gone = snapshot.states.get(rank), snapshot.gone.get(rank, "")
    if state is None:
        return f"  {rank:>4}  {'?':<{width}} {'-':>6}  {'-':<9} {'-':>6}  {gone or 'no state'}"
    age = f"{snapshot.since(rank, state.phase_since):.0f}s" if state.phase_since else "-"
    note = f"  [{gone}]" if gone else ""
    return (f"  {rank:>4}  {state.host:<{width}} {state.step:>6}  {state.phase or '-':<9} "
            f"{age:>6}  {_doing(state)}{note}")


def render_text(diagnosis: Diagnosis, snapshot: Snapshot, trigger: str = "") -> str:
    """At most ~30 lines: the verdict, the evidence, the fix, then one row per rank."""
    when = time.strftime("%H:%M:%S", time.localtime(snapshot.taken)) if snapshot.taken else ""
    head = f"ddpnet watch: {diagnosis.kind}" + (f" ({trigger}, {when})" if trigger else "")
    lines = [head, f"  {diagnosis.summary}"]
    lines += [f"  - {line}" for line in diagnosis.evidence[:8]]
    if diagnosis.hint:
        lines.append(f"  hint: {diagnosis.hint}")
    lines += [f"  signal: {line}" for line in diagnosis.signals]
    lines += [f"  would contradict it: {line}" for line in diagnosis.contradicts]
    ranks = sorted(set(snapshot.states) | set(snapshot.gone))
    shown = [(r, snapshot.states.get(r)) for r in ranks[:_ROWS]]
    width = max([14, *(len(s.host) for _, s in shown if s is not None)])
    lines.append(f"  {'rank':>4}  {'host':<{width}} {'step':>6}  {'phase':<9} {'for':>6}  "
                 "collective")
    lines += [_row(snapshot, rank, width) for rank, _state in shown]
    if len(ranks) > _ROWS:
        lines.append(f"  ... {len(ranks) - _ROWS} more ranks in the JSON report")
    return "\n".join(lines)


_CSS = ("body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1b1f24}"
        "h1{font-size:22px} .root{border:2px solid #cf222e;border-radius:6px;padding:10px 14px;"
        "max-width:980px} table{border-collapse:collapse;margin:8px 0}"
        "th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left}"
        "code{background:#f3f4f6;padding:1px 4px;border-radius:3px}")


def render_html(diagnosis: Diagnosis, snapshot: Snapshot, trigger: str = "") -> str:
    e = html.escape
    rows = "".join(
        f"<tr><td>{r}</td><td>{e(s.host if s else '?')}</td><td>{s.step if s else '-'}</td>"
        f"<td>{e(s.phase if s else '-')}</td><td>{e(_doing(s))}</td>"
        f"<td>{e(snapshot.gone.get(r, ''))}</td></tr>"
        for r, s in sorted(snapshot.states.items()))
    evidence = "".join(f"<li>{e(line)}</li>" for line in diagnosis.evidence)
    known = "".join(f"<li>{e(line)}</li>" for line in diagnosis.signals)
    against = "".join(f"<li>{e(line)}</li>" for line in diagnosis.contradicts)
    return (f"<!doctype html><meta charset=utf-8><title>ddpnet watch: {e(diagnosis.kind)}"
            f"</title><style>{_CSS}</style><h1>ddpnet watch: {e(diagnosis.kind)}</h1>"
            f"<p>{e(trigger)}</p><div class=root><b>{e(diagnosis.summary)}</b><ul>{evidence}"
            f"</ul><p>hint: {e(diagnosis.hint)}</p><p>signals that agree:</p><ul>{known}</ul>"
            f"<p>what would contradict it:</p><ul>{against}</ul></div><table><tr><th>rank</th>"
            f"<th>host</th><th>step</th><th>phase</th><th>collective</th><th>gone</th></tr>{rows}"
            f"</table>")


def _doing(state: RankState | None) -> str:
    if state is None:
        return "-"
    flight = state.in_flight()
    return f"in {describe(flight)}" if flight is not None else f"last seq {state.last_seq}"
