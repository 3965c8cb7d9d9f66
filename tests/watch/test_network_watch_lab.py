"""The whole watch against a network fault mid-training: three lab nodes run the scenario's
DDP loop with ``ddpnet.init()`` (one rank each); once it trains, node 1's firewall drops its
gloo port (the ``backend`` port its heartbeat published), or node 1's link goes down.

Firewall: every rank stalls in the same collective; the watchdog asks every rank to probe its
peers, and the verdict names kind "network", rank 1's node and that port. Link down: rank 1's
heartbeats stop while its connection stays open; the others' probes find its host answering
on no port, and rank 1 itself, cut off from the hub, exits on its own. Both within the
threshold + 15 s, and every rank exits 4."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ddpnet.lab import Lab, LabNode
from tests.lab_util import fresh_lab, requires_netns

pytestmark = requires_netns

SCENARIO = str(Path(__file__).with_name("scenario.py"))
WATCH_TIMEOUT = 5.0


class Faulter:
    """Blocks rank 1's gloo port once rank 1 published it and node 0 reported steps."""

    def __init__(self, lab: Lab, kind: str) -> None:
        self.lab, self.kind, self.port, self.steps = lab, kind, 0, 0
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
        if self.kind == "link-down":
            self.lab.fault("link-down", 1)
        else:
            self.lab.fault("block-port", 1, port=self.port)
        self.at = time.time()


def run(lab: Lab, kind: str, directory: Path) -> tuple[Faulter, list[Any]]:
    src = str(Path(__file__).resolve().parents[2] / "src")
    faulter = Faulter(lab, kind)
    results = lab.run([sys.executable, SCENARIO, "ok"], timeout=240,
                      env={"PYTHONPATH": src, "WATCH_TIMEOUT": str(WATCH_TIMEOUT),
                           "STEPS": "100000", "DDPNET_WATCH_DIR": str(directory),
                           "OMP_NUM_THREADS": "1"},
                      on_line=faulter.on_line)
    assert faulter.at is not None and faulter.port, [r.stdout[-500:] for r in results]
    return faulter, results


def test_a_firewall_on_a_gloo_port_mid_run_is_named_network(tmp_path: Path) -> None:
    with fresh_lab("wn", fork=True, nodes=3) as lab:
        faulter, results = run(lab, "block-port", tmp_path)
        node1 = lab.nodes[1].hostname
    report = results[0].stderr
    assert "ddpnet watch: network" in report, report[-3000:]
    assert f"firewall: rank 1 ({node1}" in report, report[-3000:]
    assert f"port(s) {faulter.port} are dropped" in report
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["kind"] == "network" and saved["diagnosis"]["ranks"] == [1]
    assert saved["snapshot"]["probes"], "the verdict carries this stall's probes"
    assert faulter.at is not None
    assert (tmp_path / "report.json").stat().st_mtime - faulter.at < WATCH_TIMEOUT + 15
    assert [r.returncode for r in results] == [4, 4, 4], [r.stderr[-500:] for r in results]


def test_a_link_down_mid_run_names_the_node_and_it_exits_too(tmp_path: Path) -> None:
    with fresh_lab("wd", fork=True, nodes=3) as lab:
        faulter, results = run(lab, "link-down", tmp_path)
        node1 = lab.nodes[1].hostname
    report = results[0].stderr
    assert "ddpnet watch: network" in report and f"link down: rank 1 ({node1}, " in report, \
        report[-3000:]
    assert "answers on no port from rank(s) 0, 2" in report, report[-3000:]
    assert "its link is down" in report and "ip -br link show" in report
    assert faulter.at is not None
    assert (tmp_path / "report.json").stat().st_mtime - faulter.at < WATCH_TIMEOUT + 15
    assert f"network: cut off: rank 1 ({node1}, " in results[1].stderr, \
        results[1].stderr[-1500:]
    assert [r.returncode for r in results] == [4, 4, 4], [r.stderr[-500:] for r in results]
