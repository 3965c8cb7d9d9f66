"""Renderers of a BenchResult: the nccl-tests-like table, CSV and the busbw plot; and how a
``ddpnet bench`` outcome is reported (table or JSON, threshold errors, a failing rank)."""

from __future__ import annotations

import contextlib
import csv
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ddpnet.bench.config import format_size
from ddpnet.bench.result import BenchResult, gbps_to_GBps
from ddpnet.bench.verdict import BenchOutcome
from ddpnet.output import finish, format_error

if TYPE_CHECKING:
    from ddpnet.bench.result import BenchRow

CSV_FIELDS = ("collective", "bytes", "count", "dtype", "op", "inplace", "time_us", "min_us",
              "max_us", "algbw_gbps", "busbw_gbps", "wrong", "link_efficiency")


def row_cells(r: BenchRow) -> list[str]:
    """One row's cells in the human table (GB/s = 10^9 bytes/s, as nccl-tests)."""
    return [
        r.collective, format_size(r.bytes), str(r.count), r.dtype, r.op or "-",
        "in" if r.inplace else "out", f"{r.time_us:.1f}", f"{r.min_us:.1f}",
        f"{r.max_us:.1f}", f"{gbps_to_GBps(r.algbw_gbps):.3f}",
        f"{gbps_to_GBps(r.busbw_gbps):.3f}", f"{r.busbw_gbps:.3f}",
        "N/A" if r.wrong is None else str(r.wrong),
        "-" if r.link_efficiency is None else f"{r.link_efficiency:.0%}",
    ]


def table_rows(result: BenchResult) -> list[list[str]]:
    """Cells of the human table."""
    return [row_cells(r) for r in result.rows]


def link_line(result: BenchResult) -> str:
    link = result.link
    rate = "not measured" if link.gbps is None else f"{link.gbps:.3f} Gb/s"
    nominal = "" if link.nominal_gbps is None else f", NIC nominal {link.nominal_gbps:g} Gb/s"
    where = f" on {link.interface}" if link.interface else ""
    pairs = f" over {len(link.pairs)} pair(s)" if link.pairs else ""
    note = f" ({link.note})" if link.note else ""
    return f"link ({link.method}{where}{pairs}): {rate}{nominal}{note}"


HEADER = ("collective", "size", "count", "type", "op", "place", "time us", "min us", "max us",
          "algbw GB/s", "busbw GB/s", "busbw Gb/s", "wrong", "of link")


#: the widths of a table printed row by row, before the values are known: the header's, or
#: what the longest usual value needs (a wider value shifts only its own line)
STREAM_WIDTHS = (14, 5, 10, 8, 4, 5, 10, 10, 10, 10, 10, 10, 5, 11)


def _line(row: tuple[str, ...] | list[str], widths: list[int]) -> str:
    return "  ".join(v.ljust(w) if i in (0, 3, 4, 5) else v.rjust(w)
                     for i, (v, w) in enumerate(zip(row, widths, strict=True))).rstrip()


def _header(result: BenchResult) -> tuple[str, ...]:
    return (*HEADER[:-1], f"of {result.link.name}")  # of loopback: not a NIC's share


def head_lines(result: BenchResult, widths: list[int]) -> list[str]:
    return [f"# ddpnet bench: {result.backend}, {result.world_size} ranks, {result.device}",
            "# " + link_line(result), "", _line(_header(result), widths)]


def tail_lines(result: BenchResult) -> list[str]:
    """What follows the rows: skips and verdicts."""
    return ["", *(f"skipped {s.collective}: {s.reason}" for s in result.skipped),
            *result.verdicts()]


def table_text(result: BenchResult) -> str:
    """A plain fixed-width table (like nccl-tests: greppable, never truncated), a blank line
    between collectives, then the link line, skips and verdicts."""
    cells = table_rows(result)
    widths = [max([len(h)] + [len(c[i]) for c in cells])
              for i, h in enumerate(_header(result))]
    out = head_lines(result, widths)
    previous = None
    for row in cells:
        if previous is not None and row[0] != previous:
            out.append("")
        out.append(_line(row, widths))
        previous = row[0]
    return "\n".join(out + tail_lines(result))


def render_table(result: BenchResult, console: Any) -> None:
    console.print(table_text(result), markup=False, highlight=False)


class RowStream:
    """Rank 0's table printed as the sweep goes (a :class:`Listener`): the head once the
    link is measured, then a line per finished row, so a pipe, a log or a terminal keeps
    every finished row when a later one times out. Progress: ``bar`` (a terminal), else a
    ``[bench] N/M label`` line on ``err`` per row; ``out`` None prints no rows (--json).
    ``current`` is what runs now, for the deadline's message."""

    def __init__(self, out: TextIO | None, err: TextIO | None, bar: Any = None) -> None:
        self.out, self.err, self.bar = out, err, bar
        self.current = "joining the process group"
        self.done = 0
        self._widths: list[int] = []
        self._previous = ""

    def _print(self, text: str) -> None:
        if self.bar is not None:
            self.bar.console.print(text, markup=False, highlight=False)
        elif self.out is not None:
            self.out.write(text + "\n")
            self.out.flush()

    def start(self, head: BenchResult) -> None:
        self._widths = [max(len(h), w) for h, w in zip(_header(head), STREAM_WIDTHS,
                                                         strict=True)]
        self.current = "the first collective"
        if self.out is not None:
            self._print("\n".join(head_lines(head, self._widths)))

    def measuring(self, done: int, total: int, label: str) -> None:
        self.done = done
        self.current = label
        if self.bar is not None:
            self.bar.update(self.bar.task_ids[0], completed=done, total=total,
                            description=label)
        elif self.err is not None:
            shown = f"{done + 1}/{total} {label}" if done < total else f"{total}/{total} done"
            self.err.write(f"[bench] {shown}\n")
            self.err.flush()

    def row(self, row: BenchRow) -> None:
        if self.out is None:
            return
        if self._previous and row.collective != self._previous:
            self._print("")
        self._previous = row.collective
        self._print(_line(row_cells(row), self._widths))


def write_csv(result: BenchResult, path: Path) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=[*CSV_FIELDS, "link_gbps", "link_method"])
        writer.writeheader()
        for row in result.rows:
            d = row.to_dict()
            writer.writerow({**{k: d[k] for k in CSV_FIELDS}, "link_gbps": result.link.gbps,
                             "link_method": result.link.method})


def write_plot(result: BenchResult, path: Path) -> None:
    """busbw (Gb/s) against size, one line per collective and place, the link rate dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    series: dict[str, list[tuple[int, float]]] = {}
    for r in result.rows:
        label = r.collective + ("" if r.inplace else " (out-of-place)")
        series.setdefault(label, []).append((r.bytes, r.busbw_gbps))
    for label, points in series.items():
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    if result.link.gbps is not None:
        ax.axhline(result.link.gbps, color="black", linestyle="--",
                   label=f"link {result.link.method} {result.link.gbps:.2f} Gb/s")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("busbw (Gb/s)")
    ax.set_title(f"{result.backend}, {result.world_size} ranks")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def render_outcome(outcome: BenchOutcome, console: Any) -> None:
    if outcome.result is None:
        return
    if outcome.streamed:  # the head and rows are out already
        console.print("\n".join(tail_lines(outcome.result)), markup=False, highlight=False)
    else:
        render_table(outcome.result, console)


def report(outcome: BenchOutcome, as_json: bool) -> int:
    """Print what this process reports (rank 0: the table or the JSON object, then one error
    per failed threshold; the ``--local`` parent: a failing rank's line); its exit code."""
    if outcome.result is not None:
        finish(outcome, as_json, render_outcome)
    lines = [format_error(p.message, p.hint) for p in outcome.problems]
    lines += list(outcome.notes)
    if lines:
        sys.stderr.write("\n".join(lines) + "\n")
        sys.stderr.flush()
    return int(outcome.exit_code)


@contextlib.contextmanager
def row_stream(human: bool) -> Iterator[RowStream]:
    """Rank 0's :class:`RowStream`: with a terminal on stdout and stderr, rows above a
    transient bar; else rows on stdout and progress lines on stderr (not ``human``: --json,
    neither)."""
    if not human:
        yield RowStream(None, None)
        return
    if not (sys.stderr.isatty() and sys.stdout.isatty()):
        yield RowStream(sys.stdout, sys.stderr)
        return
    from rich.progress import Progress as Bar

    from ddpnet.output import err_console

    with Bar(console=err_console(), transient=True) as bar:
        bar.add_task("bench", total=None)
        yield RowStream(sys.stdout, None, bar)
