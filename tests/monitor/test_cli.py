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
    (["--metrics-port", "9464", "--once"], "serves until stopped"),
    (["--metrics-port", "9464", "--json", "--duration", "1"], "serves until stopped"),
    (["--metrics-port", "0"], "--metrics-port"),
    (["--listen", "0.0.0.0"], "is where --metrics-port serves"),
    (["--listen", "node1", "--metrics-port", "9464"], "is not an IP address"),
    (["--iface", "lo", "--listen", "192.0.2.77", "--metrics-port", "9464"],
     "192.0.2.77 is not an address of"),
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


def test_metrics_port_serves_the_node_until_stopped_and_a_port_in_use_is_exit_2(
        run_cli: RunCli) -> None:
    """A long-running exporter with no terminal: scraped while it samples, SIGTERM ends it
    (143, the documented code); a second one on the same port is one line and exit 2."""
    import signal
    import subprocess
    import time
    import urllib.request

    from ddpnet.net.ports import listen_socket

    probe = listen_socket("127.0.0.1", 0)
    port = probe.getsockname()[1]
    probe.close()
    proc = subprocess.Popen([sys.executable, "-m", "ddpnet", "monitor", "--iface", "lo",
                             "--interval", "0.2", "--metrics-port", str(port)],
                            env=clean_environ(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    text = ""
    try:
        deadline = time.monotonic() + 60
        while "ddpnet_node_network_receive_bytes_per_second{" not in text \
                and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                            timeout=5) as answer:
                    text = answer.read().decode()
            except OSError:
                continue
        assert 'interface="lo"' in text, text
        busy = run_cli("monitor", "--iface", "lo", "--metrics-port", str(port))
        assert_user_error(busy, 2, f"127.0.0.1:{port} is already in use")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, (out, err)
    assert out == "" and f"http://127.0.0.1:{port}/metrics (127.0.0.1: lo's address; given)" \
        in err, err
