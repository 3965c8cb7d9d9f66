"""In a lab node: iperf3 through a 300 Mbit/s link is measured by ``monitor --once --json``
within 10%, and ``--peers`` names the sending node."""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable

import pytest

from ddpnet.lab import Lab
from tests.lab_util import requires_netns

pytestmark = [requires_netns,
              pytest.mark.skipif(shutil.which("iperf3") is None, reason="iperf3 not installed")]


def test_monitor_measures_shaped_iperf3(make_lab: Callable[..., Lab]) -> None:
    lab = make_lab("mo", nodes=2, rate="300mbit")
    server = lab.popen(0, ["iperf3", "-s", "-1", "-p", "5201"])
    try:
        time.sleep(0.5)
        client = lab.popen(1, ["iperf3", "-c", lab.master_addr, "-p", "5201", "-t", "8"])
        time.sleep(1.5)  # past TCP slow start
        proc = lab.exec(0, [sys.executable, "-m", "ddpnet", "monitor", "--once", "--json",
                            "--iface", "eth0", "--interval", "3", "--peers", "--no-gpu"],
                        timeout=30)
        assert proc.returncode == 0, proc.stderr
        sample = json.loads(proc.stdout)
        (eth0,) = sample["interfaces"]
        assert eth0["rx_gbps"] == pytest.approx(0.300, rel=0.10), eth0
        peers = {p["address"]: p for p in sample["peers"]}
        sender = lab.nodes[1].address
        assert sender in peers, sample["peers"]
        assert peers[sender]["rx_gbps"] == pytest.approx(0.300, rel=0.15)
        client.wait(timeout=20)
    finally:
        server.kill()
