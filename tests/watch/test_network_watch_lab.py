"""The whole watch against a network fault mid-training: three lab nodes run the scenario's
DDP loop with ``ddpnet.init()`` (one rank each); once it trains, node 1's firewall drops its
gloo port (the ``backend`` port its heartbeat published). Every rank stalls in the same
collective; the watchdog asks every rank to probe its peers, and the verdict names kind
"network", rank 1's node and that port within the threshold + 15 s; every rank exits."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

from ddpnet.lab import Lab
from ddpnet.lab.lab import LabNode
from tests.lab_util import fresh_lab, requires_netns

pytestmark = requires_netns

SCENARIO = str(Path(__file__).with_name("scenario.py"))
WATCH_TIMEOUT = 5.0


class Faulter:
    """Blocks rank 1's gloo port once rank 1 published it and node 0 reported steps."""

    def __init__(self, lab: Lab) -> None:
        self.lab, self.port, self.steps = lab, 0, 0
        self.at: float | None = None
        self.ready = threading.Event()

    def on_line(self, node: LabNode, stream: str, line: str) -> None:
        if stream != "stdout":
            return
        if node.index == 1 and line.startswith("ports "):
            self.port = int(json.loads(line[6:]).get("backend", 0))
        if node.index == 0 and line.startswith("step "):
            self.steps += 1
        if self.port and self.steps >= 2 and not self.ready.is_set():
            self.ready.set()
            threading.Thread(target=self.fault, daemon=True).start()

    def fault(self) -> None:
        self.lab.fault("block-port", 1, port=self.port)
        self.at = time.time()


def test_a_firewall_on_a_gloo_port_mid_run_is_named_network(tmp_path: Path) -> None:
    src = str(Path(__file__).resolve().parents[2] / "src")
    with fresh_lab("wn", nodes=3) as lab:
        faulter = Faulter(lab)
        results = lab.run([sys.executable, SCENARIO, "ok"], timeout=240,
                          env={"PYTHONPATH": src, "WATCH_TIMEOUT": str(WATCH_TIMEOUT),
                               "STEPS": "100000", "DDPNET_WATCH_DIR": str(tmp_path),
                               "OMP_NUM_THREADS": "1"},
                          on_line=faulter.on_line)
        node1 = lab.nodes[1].hostname
    report = results[0].stderr
    assert faulter.at is not None and faulter.port, [r.stdout[-500:] for r in results]
    assert "ddpnet watch: network" in report, report[-3000:]
    assert f"firewall: rank 1 ({node1}" in report, report[-3000:]
    assert f"port(s) {faulter.port} are dropped" in report
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["kind"] == "network" and saved["diagnosis"]["ranks"] == [1]
    assert saved["snapshot"]["probes"], "the verdict carries this stall's probes"
    assert (tmp_path / "report.json").stat().st_mtime - faulter.at < WATCH_TIMEOUT + 15
    assert [r.returncode for r in results] == [4, 4, 4], [r.stderr[-500:] for r in results]
