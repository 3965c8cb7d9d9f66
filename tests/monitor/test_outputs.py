"""Interface choice, CSV recording, plotting and GPUs from fixtures."""

from __future__ import annotations

import csv
import functools
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ddpnet.errors import ConfigError
from ddpnet.monitor.plot import plot_series
from ddpnet.monitor.rates import compute
from ddpnet.monitor.record import CsvRecorder, read_series
from ddpnet.monitor.select import choose
from ddpnet.monitor.sources import NvmlGpus
from tests.monitor.fixtures import counters, snap


def test_choose_auto_uses_init_selection() -> None:
    c = choose("auto", ["lo", "eth0", "docker0"], auto=lambda: ("eth0", "routes to master"))
    assert c.names == ("eth0",) and c.source == "auto" and "routes to master" in c.reason


def test_choose_auto_falls_back_without_selection() -> None:
    def boom() -> tuple[str, str]:
        raise RuntimeError("no route")

    c = choose("auto", ["lo", "eth0", "eth1"], auto=boom)
    assert c.names == ("eth0", "eth1") and "no route" in c.reason


def test_choose_named_and_missing() -> None:
    assert choose("eth0,lo", ["lo", "eth0"]).names == ("eth0", "lo")
    with pytest.raises(ConfigError) as info:
        choose("ib0", ["lo", "eth0"])
    assert "ib0" in str(info.value) and "eth0" in info.value.hint


def test_record_appends_rows_and_refuses_other_columns(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    rec = CsvRecorder(path, ["eth0"], 0)
    for t in range(3):
        rec.append(compute(snap(t, counters(0, 0)), snap(t + 1, counters(125_000_000, 0)),
                           ["eth0"]))
    CsvRecorder(path, ["eth0"], 0)  # same columns: appending again is fine
    rows = list(csv.reader(path.open()))
    assert rows[0] == ["time", "eth0.rx_gbps", "eth0.tx_gbps", "eth0.errors", "eth0.drops",
                       "tcp.retrans_per_s"]
    assert len(rows) == 4 and float(rows[1][1]) == pytest.approx(1.0)
    with pytest.raises(ConfigError):
        CsvRecorder(path, ["eth1"], 0)


def test_plot_writes_a_png(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    rec = CsvRecorder(path, ["eth0"], 0)
    for t in range(5):
        rec.append(compute(snap(t, counters(0, 0)), snap(t + 1, counters(t * 10**7, 0)),
                           ["eth0"]))
    cols, rows = read_series(path)
    plot_series(cols, rows, tmp_path / "m.png")
    data = (tmp_path / "m.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    with pytest.raises(ConfigError):
        plot_series(cols, [], tmp_path / "empty.png")


class FakeNvml:
    """The subset of pynvml the monitor calls, with one GPU that lacks power readings."""

    NVML_PCIE_UTIL_TX_BYTES = 0
    NVML_PCIE_UTIL_RX_BYTES = 1

    def __init__(self, fail_init: bool = False) -> None:
        self.fail_init = fail_init

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return SimpleNamespace(gpu=87 if h == 0 else 3, memory=10)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(used=40 * 2**30, total=80 * 2**30)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        if h == 1:
            raise RuntimeError("Not Supported")
        return 512_000

    def nvmlDeviceGetPcieThroughput(self, h: int, counter: int) -> int:
        return 2_000_000 if counter == self.NVML_PCIE_UTIL_TX_BYTES else 1_000_000


def test_gpu_readings_from_nvml() -> None:
    gpus = NvmlGpus(FakeNvml())
    assert gpus.available
    g0, g1 = gpus.read()
    assert (g0.name, g0.util_percent, g0.memory_used_mib) == ("NVIDIA H100 80GB HBM3", 87.0,
                                                              40 * 1024)
    assert g0.power_w == pytest.approx(512.0) and g0.pcie_tx_mbps == pytest.approx(2000.0)
    assert g1.power_w is None  # unsupported reading, not a crash


def test_no_gpu_is_skipped_cleanly() -> None:
    gpus = NvmlGpus(FakeNvml(fail_init=True))
    assert not gpus.available and "no NVIDIA driver" in gpus.reason
    assert gpus.read() == ()


def test_auto_is_the_one_selector_s_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    from ddpnet.monitor import select as monitor_select
    from ddpnet.net import select as net_select
    from ddpnet.net.select import Ask, InterfaceChoice

    asked: list[tuple[Ask, bool]] = []

    def fake(ask: Ask, *, environ: Mapping[str, str], route_master: bool) -> InterfaceChoice:
        asked.append((ask, route_master))
        return InterfaceChoice("eth0", "route", "routes to MASTER_ADDR 10.0.0.1")

    monkeypatch.setattr(net_select, "choose_for_host", fake)
    in_job = functools.partial(monitor_select._init_selection, {"MASTER_ADDR": "10.0.0.1"})
    c = choose("auto", ["lo", "eth0"], auto=in_job)
    assert c.names == ("eth0",) and "routes to MASTER_ADDR 10.0.0.1" in c.reason
    assert asked == [(Ask(), True)]
    # no job: the node's cluster interface (subnet, default route, first NIC), never a
    # MASTER_ADDR of 127.0.0.1 by default; the exporter takes no loopback even in a job
    choose("auto", ["lo", "eth0"], auto=functools.partial(monitor_select._init_selection, {},
                                                          loopback_ok=False))
    assert asked[-1] == (Ask(loopback_ok=False), False)
    monkeypatch.setattr(net_select, "choose_for_host",
                        lambda ask, **_: InterfaceChoice(None, "none", "no route to MASTER_ADDR"))
    c = choose("auto", ["lo", "eth0"], auto=monitor_select._init_selection)
    assert c.names == ("eth0",) and "no route to MASTER_ADDR" in c.reason
