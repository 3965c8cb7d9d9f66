"""Rows (algbw, busbw, efficiency), verdicts, thresholds, and the three output formats."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from ddpnet.bench.render import CSV_FIELDS, table_text, write_csv, write_plot
from ddpnet.bench.result import (
    BenchResult,
    BenchRow,
    LinkRate,
    PairRate,
    Skipped,
    make_row,
    plateau,
)

MIB64 = 64 << 20


def test_make_row_units() -> None:
    # 64 MiB in a median 0.85 s on 4 ranks: algbw 0.6316 Gb/s, busbw x1.5
    row = make_row("all_reduce", MIB64, MIB64 // 4, "float32", "sum", True,
                   [0.9, 0.85, 0.8], 1.5, 0.94, wrong=0)
    assert row.time_us == pytest.approx(850000)
    assert (row.min_us, row.max_us) == (pytest.approx(800000), pytest.approx(900000))
    assert row.algbw_gbps == pytest.approx(MIB64 * 8 / 0.85 / 1e9)
    assert row.busbw_gbps == pytest.approx(row.algbw_gbps * 1.5)
    assert row.link_efficiency == pytest.approx(row.busbw_gbps / 0.94)


def test_make_row_even_count_median_and_no_link() -> None:
    row = make_row("broadcast", 1000, 250, "float32", None, True, [1.0, 3.0, 2.0, 4.0], 1.0,
                   None, None)
    assert row.time_us == pytest.approx(2.5e6)
    assert row.link_efficiency is None and row.wrong is None


def sample() -> BenchResult:
    link = LinkRate(0.94, "iperf3", 10.0, "eth0", (PairRate(0, 1, 0.94), PairRate(1, 0, 0.95)))
    rows = (
        make_row("all_reduce", 1 << 20, 1 << 18, "float32", "sum", True, [0.02], 1.5, 0.94, 0),
        make_row("all_reduce", MIB64, MIB64 // 4, "float32", "sum", True, [0.85], 1.5, 0.94, 0),
        make_row("all_gather", MIB64, MIB64 // 4, "float32", None, False, [0.6], 0.75, 0.94, 3),
    )
    return BenchResult("gloo", 4, "cpu", link, rows,
                       (Skipped("send_recv", "needs at least 2 ranks"),))


def test_peak_verdicts_and_threshold() -> None:
    res = sample()
    assert res.peak()["all_reduce"].bytes == MIB64
    verdicts = res.verdicts()
    assert verdicts[0].startswith("all_reduce reaches 101% of the link")
    assert "at 64M" in verdicts[0]
    assert [r.collective for r in res.below(0.9)] == ["all_gather"]
    assert res.below(0.1) == []
    assert res.wrong == 3


def test_to_dict_schema() -> None:
    doc = json.loads(json.dumps(sample().to_dict()))
    assert {"backend", "world_size", "link", "rows"} <= set(doc)
    assert {"gbps", "method", "nominal_gbps"} <= set(doc["link"])
    assert doc["link"]["pairs"][1] == {"src": 1, "dst": 0, "gbps": 0.95, "error": None}
    required = {"collective", "bytes", "dtype", "inplace", "time_us", "algbw_gbps",
                "busbw_gbps", "wrong", "link_efficiency"}
    for row in doc["rows"]:
        assert required <= set(row)
    assert doc["skipped"] == [{"collective": "send_recv", "reason": "needs at least 2 ranks"}]
    assert doc["wrong"] == 3


def test_table_text() -> None:
    text = table_text(sample())
    lines = text.splitlines()
    assert lines[0] == "# ddpnet bench: gloo, 4 ranks, cpu"
    assert "iperf3 on eth0 over 2 pair(s)): 0.940 Gb/s, NIC nominal 10 Gb/s" in lines[1]
    header = next(ln for ln in lines if ln.startswith("collective"))
    assert "busbw GB/s" in header and "of link" in header
    row64 = next(ln for ln in lines if ln.startswith("all_reduce") and " 64M " in ln)
    # GB/s = Gb/s / 8 in the table: busbw 0.947 Gb/s -> 0.118 GB/s
    assert "0.118" in row64 and "0.947" in row64 and "101%" in row64
    assert "skipped send_recv: needs at least 2 ranks" in text


def test_csv(tmp_path: Path) -> None:
    path = tmp_path / "rows.csv"
    write_csv(sample(), path)
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 3
    assert list(rows[0]) == [*CSV_FIELDS, "link_gbps", "link_method"]
    assert rows[1]["bytes"] == str(MIB64) and rows[1]["link_method"] == "iperf3"
    assert float(rows[1]["busbw_gbps"]) == pytest.approx(0.947, abs=1e-3)


def test_plot_is_a_png(tmp_path: Path) -> None:
    path = tmp_path / "bw.png"
    write_plot(sample(), path)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_one_rank_verdict_says_why_busbw_is_empty() -> None:
    row = make_row("all_reduce", 1024, 256, "float32", "sum", True, [1e-5], 0.0, None, None)
    result = BenchResult("gloo", 1, "cpu", LinkRate(None, "none"), (row,))
    [line] = result.verdicts()
    assert line.startswith("one rank: nothing crosses a link")


def _rows(busbw_by_size: dict[int, float], link: float | None) -> tuple[BenchRow, ...]:
    """Synthetic all_reduce rows with the given busbw (bus factor 1, 1 s per iteration)."""
    return tuple(make_row("all_reduce", n, n // 4, "float32", "sum", True,
                          [n * 8 / (g * 1e9)], 1.0, link, 0)
                 for n, g in busbw_by_size.items())


def test_the_verdict_is_judged_at_the_plateau_not_at_a_shapers_burst() -> None:
    """Issue 19: over a 5 Gb/s shaped link the 4M size went through at 130% (the shaper's
    burst) while 64M-256M settled at 100%: the headline names the plateau, and says why the
    peak is not the link's rate."""
    mib = 1 << 20
    sweep = {1 * mib: 2.0, 4 * mib: 6.5, 16 * mib: 5.4, 64 * mib: 5.0, 128 * mib: 4.95,
             256 * mib: 5.02}
    res = BenchResult("nccl", 2, "cuda", LinkRate(5.0, "iperf3"), _rows(sweep, 5.0))
    plat = res.plateaus()["all_reduce"]
    assert plat.sizes == (64 * mib, 128 * mib, 256 * mib)
    assert plat.busbw_gbps == pytest.approx(5.0)
    [line] = res.verdicts()
    assert line.startswith("all_reduce reaches 100% of the link at the plateau "
                           "(5.000 of 5.000 Gb/s, median busbw at 64M-256M)")
    assert "peak 6.500 Gb/s at 4M is not the link's rate" in line
    assert "130%" not in line
    assert res.to_dict()["plateau"]["all_reduce"]["bytes"] == [64 * mib, 128 * mib, 256 * mib]


def test_plateau_takes_each_sizes_best_place_and_stays_near_the_largest_size() -> None:
    rows = (*_rows({1 << 10: 0.1, 1 << 20: 0.9, 4 << 20: 1.0}, None),
            make_row("all_reduce", 4 << 20, 1 << 20, "float32", "sum", False,
                     [(4 << 20) * 8 / 0.5e9], 1.0, None, 0))
    plat = plateau(list(rows), None)
    assert plat.sizes == (1 << 20, 4 << 20)  # 1K is more than 16x below the largest
    assert plat.busbw_gbps == pytest.approx(0.95) and plat.link_efficiency is None
    res = BenchResult("gloo", 2, "cpu", LinkRate(None, "none"), rows)
    [line] = res.verdicts()
    assert line.startswith("all_reduce peaks at 1.000 Gb/s busbw (at 4M), 0.950 at the "
                           "plateau (median busbw at 1M-4M); no link baseline")


def test_a_plateau_without_a_burst_names_no_peak() -> None:
    res = BenchResult("gloo", 2, "cpu", LinkRate(1.0, "tcp"),
                      _rows({1 << 20: 0.5, 2 << 20: 0.97, 4 << 20: 1.0}, 1.0))
    [line] = res.verdicts()
    assert "at the plateau" in line and "peak" not in line


def test_a_share_of_loopback_is_not_presented_as_a_links() -> None:
    """Two ranks of one host reach 207% of loopback's stream: the verdict and the table say
    loopback, not "the link", on the line itself."""
    link = LinkRate(1.0, "iperf3", None, "lo", (PairRate(0, 1, 1.0),),
                    "loopback: all ranks on one host", loopback=True)
    res = BenchResult("gloo", 2, "cpu", link, _rows({2 << 20: 2.07}, 1.0))
    [line] = res.verdicts()
    assert line.startswith("all_reduce reaches 207% of loopback (ranks of one host: memory "
                           "copies, not a network) at the plateau")
    assert "of the link" not in line
    header = table_text(res).splitlines()[3]
    assert header.endswith("of loopback") and "of link" not in header
    assert res.to_dict()["link"]["loopback"] is True
    assert table_text(sample()).splitlines()[3].endswith("of link")
