"""``ddpnet doctor`` for real inside ``ddpnet lab`` nodes (network namespaces): a healthy node
passes, a hostname on 127.0.1.1 fails ``names``, a blocked MASTER_PORT fails ``firewall``
for an nftables and an iptables rule set, and the rule set the doctor suggests outside a job
still lets peers connect."""

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


#: node 1 listens on the master port and an ephemeral one, and dials itself over loopback;
#: node 0 dials both: what the ranks of a job do through the rule the doctor suggests
CONNECT = """
import os, socket, sys, time
peer, ports = sys.argv[1], (29500, 40000)
if os.environ["NODE_RANK"] == "1":
    socks = []
    for port in ports:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", port))
        s.listen(8)
        s.settimeout(30)
        socks.append(s)
    for port in ports:
        socket.create_connection(("127.0.0.1", port), 5).close()
    for s in socks:
        for _ in range(2):
            s.accept()[0].close()
    print("accepted")
else:
    deadline = time.monotonic() + 20
    for port in ports:
        while True:
            try:
                socket.create_connection((peer, port), 3).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    print("connected")
"""


def test_the_firewall_rule_suggested_outside_a_job_lets_peers_in(lab: Lab) -> None:
    """No MASTER_ADDR (doctor before any job): the suggested rule admits the node's cluster
    subnet, not loopback (``ip saddr != 127.0.0.0/8 ... drop`` shut every peer out); applied
    in the node, peers and loopback still connect to the master and an ephemeral port."""
    done = lab.exec(1, DOCTOR, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, timeout=60)
    assert "Traceback" not in done.stderr, done.stderr
    fix = by_id(json.loads(done.stdout))["firewall.manager"]["fix"]
    assert "127.0.0.0/8" not in fix and "saddr != 198.18.0.0/24" in fix, fix
    rules = fix.partition("e.g. ")[2]
    assert rules.startswith("nft add table"), fix
    applied = lab.exec(1, ["sh", "-c", rules])
    try:
        assert applied.returncode == 0, applied.stderr
        results = lab.run([sys.executable, "-c", CONNECT, lab.nodes[1].address], timeout=60)
        for r in results:
            assert r.returncode == 0, (r.node.index, r.stdout, r.stderr)
    finally:
        lab.exec(1, ["nft", "delete", "table", "inet", "ddpnet"])
