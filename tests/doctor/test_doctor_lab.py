"""``ddpnet doctor`` for real inside ``ddpnet lab`` nodes (network namespaces): a healthy node
passes, a hostname on 127.0.1.1 fails ``names``, a blocked MASTER_PORT fails ``firewall``
for an nftables and an iptables rule set."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from ddpnet.lab import Lab
from tests.lab_util import fresh_lab, requires_netns

pytestmark = [requires_netns, pytest.mark.root]

PORT = 29533
DOCTOR = [sys.executable, "-m", "ddpnet", "doctor", "--json"]


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with fresh_lab("dr", fork=True, nodes=2) as lab:
        yield lab


@pytest.fixture(autouse=True)
def _clear(lab: Lab) -> Iterator[None]:
    lab.clear()
    yield
    lab.clear()


def doctor_on(lab: Lab, nodes: list[int] | None = None) -> list[tuple[int, dict[str, Any]]]:
    results = lab.run(DOCTOR, nodes=nodes, master_port=PORT, timeout=60)
    out = []
    for r in results:
        assert "Traceback" not in r.stderr, r.stderr
        data = json.loads(r.stdout)
        assert r.returncode == (1 if data["verdict"] == "fail" else 0), (r.returncode, data)
        out.append((r.node.index, data))
    return out


def by_id(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in data["checks"]}


def test_healthy_lab_nodes_pass(lab: Lab) -> None:
    for index, data in doctor_on(lab):
        checks = by_id(data)
        failed = [c for c in data["checks"] if c["status"] == "fail"]
        assert not failed, (index, failed)
        node = lab.nodes[index]
        for cid in ("rendezvous.config", "rendezvous.master-port", "names.hostname",
                    "names.master", "interfaces.selected", "firewall.master-port",
                    "firewall.ephemeral", "software.torch", "environment.ifname"):
            assert checks[cid]["status"] == "pass", (index, checks[cid])
        f = data["facts"]
        assert (f["hostname"], f["interface"], f["address"], f["hostname_loopback"]) == (
            node.hostname, node.ifname, node.address, False)
        assert f["subnet"] == "198.18.0.0/24" and f["mtu"] == 1500


def test_hostname_on_127_0_1_1_fails_names(lab: Lab) -> None:
    lab.fault("hostname-loopback", 1)
    (_, data), = doctor_on(lab, nodes=[1])
    res = by_id(data)["names.hostname"]
    assert data["verdict"] == "fail"
    assert res["status"] == "fail" and "127.0.1.1" in res["summary"], res
    assert lab.nodes[1].address in res["fix"]
    assert data["facts"]["hostname_loopback"] is True


def test_blocked_master_port_fails_firewall_nftables(lab: Lab) -> None:
    lab.fault("block-port", 0, port=PORT)
    results = dict(doctor_on(lab))
    res = by_id(results[0])["firewall.master-port"]
    assert res["status"] == "fail", res
    assert res["summary"] == f"{PORT}/tcp from 198.18.0.0/24 is dropped by nftables"
    assert res["fix"].startswith(f"nft insert rule inet ddpnet_lab input ip saddr "
                                 f"198.18.0.0/24 tcp dport {PORT} accept")
    assert by_id(results[1])["firewall.master-port"]["status"] == "pass"


@pytest.mark.skipif(shutil.which("iptables") is None, reason="iptables not installed")
def test_blocked_master_port_fails_firewall_iptables(lab: Lab) -> None:
    rule = ["INPUT", "-p", "tcp", "--dport", str(PORT), "-j", "REJECT"]
    added = lab.exec(0, ["iptables", "-A", *rule])
    assert added.returncode == 0, added.stderr
    try:
        (_, data), = doctor_on(lab, nodes=[0])
    finally:
        lab.exec(0, ["iptables", "-D", *rule])
    res = by_id(data)["firewall.master-port"]
    assert res["status"] == "fail", res
    assert res["summary"] == f"{PORT}/tcp from 198.18.0.0/24 is rejected by iptables"
    assert f"iptables -I INPUT -s 198.18.0.0/24 -p tcp --dport {PORT} -j ACCEPT" in res["fix"]
