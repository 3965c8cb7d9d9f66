"""``--record FILE.csv``: one row per sample, columns fixed by the interfaces chosen at start."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from ddpnet.errors import ConfigError
from ddpnet.monitor.rates import Sample

_IF_FIELDS = ("rx_gbps", "tx_gbps", "errors", "drops")


def header(names: Sequence[str], gpus: int) -> list[str]:
    cols = ["time"]
    for n in names:
        cols += [f"{n}.{f}" for f in _IF_FIELDS]
    cols += ["tcp.retrans_per_s"]
    for g in range(gpus):
        cols += [f"gpu{g}.util_percent", f"gpu{g}.memory_used_mib"]
    return cols


def row(sample: Sample, names: Sequence[str], gpus: int) -> list[str]:
    by_name = {i.name: i for i in sample.interfaces}
    out = [f"{sample.time:.3f}"]
    for n in names:
        i = by_name.get(n)
        out += ["" if i is None else f"{getattr(i, f):.6g}" for f in _IF_FIELDS]
    out.append(f"{sample.retrans_per_s:.6g}")
    for g in range(gpus):
        reading = sample.gpus[g] if g < len(sample.gpus) else None
        out += ["", ""] if reading is None else [f"{reading.util_percent:.6g}",
                                                 f"{reading.memory_used_mib:.6g}"]
    return out


class CsvRecorder:
    """Appends rows; a new file gets the header, an existing one must have the same header."""

    def __init__(self, path: Path, names: Sequence[str], gpus: int) -> None:
        self.path, self.names, self.gpus = path, list(names), gpus
        want = header(self.names, gpus)
        if path.exists() and path.stat().st_size > 0:
            with path.open(newline="") as fh:
                have = next(csv.reader(fh), [])
            if have != want:
                raise ConfigError(
                    f"{path} holds other columns ({', '.join(have[:4])}...) than this run "
                    f"({', '.join(want[:4])}...)",
                    "record to a new file, or monitor the same --iface as before",
                )
        else:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with path.open("w", newline="") as fh:
                    csv.writer(fh).writerow(want)
            except OSError as exc:
                raise ConfigError(f"cannot write {path}: {exc.strerror}",
                                  "choose a writable path for --record") from None

    def append(self, sample: Sample) -> None:
        with self.path.open("a", newline="") as fh:
            csv.writer(fh).writerow(row(sample, self.names, self.gpus))


def read_series(path: Path) -> tuple[list[str], list[list[float | None]]]:
    """Header and numeric rows of a recorded CSV (empty cells become None)."""
    with path.open(newline="") as fh:
        reader = csv.reader(fh)
        cols = next(reader, [])
        rows = [[float(c) if c else None for c in r] for r in reader if r]
    return cols, rows
