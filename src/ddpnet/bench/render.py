"""Renderers of a BenchResult: the nccl-tests-like table, CSV and the busbw plot; and how a
``ddpnet bench`` outcome is reported (table or JSON, threshold errors, a failing rank)."""

from __future__ import annotations

import contextlib
import csv
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddpnet.bench.config import format_size
from ddpnet.bench.result import BenchResult, gbps_to_GBps
from ddpnet.bench.verdict import BenchOutcome
from ddpnet.output import finish, format_error

if TYPE_CHECKING:
    from ddpnet.bench.driver import Progress

CSV_FIELDS = ("collective", "bytes", "count", "dtype", "op", "inplace", "time_us", "min_us",
              "max_us", "algbw_gbps", "busbw_gbps", "wrong", "link_efficiency")


def table_rows(result: BenchResult) -> list[list[str]]:
    """Cells of the human table (GB/s = 10^9 bytes/s, as nccl-tests)."""
    out = []
    for r in result.rows:
        out.append([
            r.collective, format_size(r.bytes), str(r.count), r.dtype, r.op or "-",
            "in" if r.inplace else "out", f"{r.time_us:.1f}", f"{r.min_us:.1f}",
            f"{r.max_us:.1f}", f"{gbps_to_GBps(r.algbw_gbps):.3f}",
            f"{gbps_to_GBps(r.busbw_gbps):.3f}", f"{r.busbw_gbps:.3f}",
            "N/A" if r.wrong is None else str(r.wrong),
            "-" if r.link_efficiency is None else f"{r.link_efficiency:.0%}",
        ])
    return out


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


def table_text(result: BenchResult) -> str:
    """A plain fixed-width table (like nccl-tests: greppable, never truncated), a blank line
    between collectives, then the link line, skips and verdicts."""
    cells = table_rows(result)
    header = (*HEADER[:-1], f"of {result.link.name}")  # of loopback: not a NIC's share
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(header)]

    def line(row: tuple[str, ...] | list[str]) -> str:
        return "  ".join(v.ljust(w) if i in (0, 3, 4, 5) else v.rjust(w)
                         for i, (v, w) in enumerate(zip(row, widths, strict=True))).rstrip()

    out = [f"# ddpnet bench: {result.backend}, {result.world_size} ranks, {result.device}",
           "# " + link_line(result), "", line(header)]
    previous = None
    for row in cells:
        if previous is not None and row[0] != previous:
            out.append("")
        out.append(line(row))
        previous = row[0]
    out.append("")
    out += [f"skipped {s.collective}: {s.reason}" for s in result.skipped]
    out += result.verdicts()
    return "\n".join(out)


def render_table(result: BenchResult, console: Any) -> None:
    console.print(table_text(result), markup=False, highlight=False)


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
    if outcome.result is not None:
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
def progress_bar() -> Iterator[Progress | None]:
    """A transient bar on stderr while the sweep runs; None when stderr is not a terminal."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.progress import Progress as Bar

    from ddpnet.output import err_console

    with Bar(console=err_console(), transient=True) as bar:
        task = bar.add_task("bench", total=None)

        def update(done: int, total: int, label: str) -> None:
            bar.update(task, completed=done, total=total, description=label)

        yield update
