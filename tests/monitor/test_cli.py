"""The real ``ddpnet monitor`` command: JSON schema, bad input, record+plot, live view."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

from tests.conftest import RunCli, assert_user_error, clean_environ


def test_once_json_schema(run_cli: RunCli) -> None:
    proc = run_cli("monitor", "--once", "--json", "--interval", "0.2", "--iface", "all",
                   "--peers", "--no-gpu")
    assert proc.returncode == 0, proc.stderr
    obj = json.loads(proc.stdout)
    assert set(obj) >= {"time", "interfaces", "tcp", "peers", "gpus"}
    assert {"lo"} <= {i["name"] for i in obj["interfaces"]}
    for i in obj["interfaces"]:
        assert set(i) >= {"name", "rx_gbps", "tx_gbps", "link_gbps", "errors", "drops"}
    assert "retrans_per_s" in obj["tcp"] and obj["gpus"] == []


@pytest.mark.parametrize(("args", "needle"), [
    (["--iface", "nonexistent0"], "nonexistent0"),
    (["--interval", "0"], "--interval"),
    (["--interval", "nan", "--once"], "--interval"),
    (["--duration", "nan", "--json"], "--duration"),
    (["--duration", "inf"], "--duration"),
    (["--json"], "--json needs"),
    (["--gpu", "--once"], "--gpu"),
])
def test_bad_input(run_cli: RunCli, args: list[str], needle: str) -> None:
    if args[0] == "--gpu" and Path("/dev/nvidiactl").exists():
        pytest.skip("a GPU is present: --gpu is valid here")
    assert_user_error(run_cli("monitor", *args), 2, needle)


def test_record_and_plot(run_cli: RunCli, tmp_path: Path) -> None:
    proc = run_cli("monitor", "--iface", "lo", "--interval", "0.2", "--duration", "1",
                   "--record", str(tmp_path / "m.csv"), "--plot", str(tmp_path / "m.png"))
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.reader((tmp_path / "m.csv").open()))
    assert rows[0][:2] == ["time", "lo.rx_gbps"] and len(rows) >= 4
    assert (tmp_path / "m.png").read_bytes()[:4] == b"\x89PNG"


def test_live_view_quits_on_ctrl_c() -> None:
    pexpect = pytest.importorskip("pexpect")
    child = pexpect.spawn(sys.executable, ["-m", "ddpnet", "monitor", "--iface", "lo",
                                           "--interval", "0.3"],
                          env=clean_environ({"TERM": "xterm", "COLUMNS": "120",
                                             "LINES": "40"}),
                          dimensions=(40, 120), timeout=30, encoding="utf-8")
    child.expect("TCP retransmits")
    child.expect("Ctrl-C to quit")
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
