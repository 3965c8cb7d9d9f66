"""``ddpnet doctor --slurm-health`` as the real SLURM's HealthCheckProgram on a 3-node lab
(munged, slurmctld, a slurmd per node namespace, each running it every few seconds): the
node whose firewall drops ephemeral ports is drained with the failing check and its fix as
the reason, a healthy node and a node drained by hand are left alone, and the node ddpnet
drained is resumed once the firewall is fixed."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ddpnet.lab import Lab
from ddpnet.lab import slurm as labslurm
from ddpnet.launch.scontrol import parse_node_line
from tests.lab_util import fresh_lab, requires_netns
from tests.slurm_util import slurm_missing

pytestmark = requires_netns
ROOT = Path(__file__).resolve().parents[2]
#: slurmd runs the health check this often (seconds)
INTERVAL_S = 3
BY_HAND = "maintenance by hand: disk swap"


@pytest.fixture(scope="module")
def health_lab() -> Iterator[tuple[Lab, Path]]:
    reason = slurm_missing()
    if reason:
        pytest.skip(reason)
    logs = Path(tempfile.mkdtemp(prefix="ddpnet-health-"))
    logs.chmod(0o755)
    with fresh_lab("lh", nodes=3) as lab:
        program = logs / "health.sh"
        conf = labslurm.root_dir(lab.name) / "slurm.conf"
        program.write_text(
            "#!/bin/sh\n"
            f"export SLURM_CONF={shlex.quote(str(conf))} "
            f"PYTHONPATH={shlex.quote(str(ROOT / 'src'))}\n"
            f"exec {shlex.quote(sys.executable)} -m ddpnet doctor --slurm-health "
            f'>> {shlex.quote(str(logs))}/"$(hostname)".log 2>&1\n')
        program.chmod(0o755)
        labslurm.start(lab, extra=(f"HealthCheckProgram={program}",
                                   f"HealthCheckInterval={INTERVAL_S}"))
        try:
            yield lab, logs
        finally:
            labslurm.stop(lab.name)
            subprocess.run(["rm", "-rf", str(logs)], check=False)


def _client(lab: Lab, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(labslurm.client_wrapper(lab.name)), *argv], capture_output=True,
                          text=True, timeout=60, env={**os.environ})


def _node(lab: Lab, i: int) -> dict[str, str]:
    return parse_node_line(_client(lab, "scontrol", "show", "node", lab.nodes[i].hostname,
                                   "-o").stdout)


def _log(logs: Path, lab: Lab, i: int) -> str:
    path = logs / f"{lab.nodes[i].hostname}.log"
    return path.read_text() if path.exists() else ""


def _until(what: str, ready: Any, lab: Lab, logs: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.5)
    pytest.fail(f"{what} within {timeout} s; nodes: {[_node(lab, i) for i in range(3)]}; "
                f"logs: {[_log(logs, lab, i)[-1500:] for i in range(3)]}")


def test_doctor_drains_a_node_whose_firewall_drops_ephemeral_ports_and_resumes_it_fixed(
        health_lab: tuple[Lab, Path]) -> None:
    lab, logs = health_lab
    hand = lab.nodes[2].hostname
    assert _client(lab, "scontrol", "update", f"NodeName={hand}", "State=DRAIN",
                   f"Reason={BY_HAND}").returncode == 0
    try:
        # slurmd's own port stays open: only what a job's backend connects to is dropped
        lab.fault("block-ephemeral", 1, port=labslurm.SLURMD_PORT)
        bad = lab.nodes[1].hostname
        _until("node 1 drained by the health check",
               lambda: "DRAIN" in _node(lab, 1).get("State", ""), lab, logs)
        reason = _node(lab, 1)["Reason"]
        assert reason.startswith("ddpnet: doctor: firewall.ephemeral: 32768:60999/tcp from "), \
            reason
        assert len(reason.encode()) <= 255 and "\n" not in reason
        _until("the health check's own line", lambda: f"{bad} drained:" in _log(logs, lab, 1),
               lab, logs)
        assert f"ddpnet doctor --slurm-health: {bad} drained: {reason}" in _log(logs, lab, 1)
        # the healthy node and the one drained by hand: checked, left alone
        _until("a check of the other nodes after the drain",
               lambda: "drained by someone else" in _log(logs, lab, 2)
               and "left as it is: healthy" in _log(logs, lab, 0), lab, logs)
        assert "DRAIN" not in _node(lab, 0)["State"]
        assert _node(lab, 2)["Reason"] == BY_HAND
        lab.clear(1)
        _until("node 1 resumed once its firewall passes",
               lambda: "DRAIN" not in _node(lab, 1).get("State", "DRAIN"), lab, logs)
        _until("the health check's own line", lambda: f"{bad} resumed:" in _log(logs, lab, 1),
               lab, logs)
        assert f"{bad} resumed: passes every check that breaks a job; it was drained by " \
            f"ddpnet: {reason}" in _log(logs, lab, 1)
        assert "DRAIN" in _node(lab, 2)["State"] and _node(lab, 2)["Reason"] == BY_HAND
        # resumed with UNDRAIN: the drain lifted, nothing else (a DOWN would stay)
        assert _node(lab, 1)["State"].split("+")[0] in ("IDLE", "MIXED", "ALLOCATED")
    finally:
        lab.clear(1)
        _client(lab, "scontrol", "update", f"NodeName={hand}", "State=RESUME")


def test_a_node_whose_mtu_is_below_its_peers_is_drained_and_resumed_once_fixed(
        health_lab: tuple[Lab, Path]) -> None:
    """Each health check publishes its node's MTU (the node's Extra field) and compares it
    with the others': node 1 at 1400 among two at the lab's MTU is drained with the peers'
    MTU in its fix; back at the lab's MTU it is resumed."""
    lab, logs = health_lab
    bad = lab.nodes[1].hostname
    peers = {i: _node(lab, i).get("Extra", "") for i in (0, 2)}
    lab_mtu = next(int(e.split("=")[1]) for e in peers.values() if e.startswith("ddpnet-mtu="))
    try:
        lab.fault("mtu", 1, mtu=1400)
        _until("node 1 drained for its MTU", lambda: "interfaces.mtu-peers" in _node(
            lab, 1).get("Reason", ""), lab, logs)
        reason = _node(lab, 1)["Reason"]
        assert reason.startswith(f"ddpnet: doctor: interfaces.mtu-peers: {lab.nodes[1].ifname} "
                                 f"mtu 1400 is below its peers' {lab_mtu} (2 of 2: "), reason
        assert f"fix: ip link set {lab.nodes[1].ifname} mtu {lab_mtu}" in reason
        lab.clear(1)
        _until("node 1 resumed at the lab's MTU",
               lambda: "DRAIN" not in _node(lab, 1).get("State", "DRAIN"), lab, logs)
    finally:
        lab.clear(1)
        _client(lab, "scontrol", "update", f"NodeName={bad}", "State=RESUME")
