"""Field failures (issue 18) reproduced on a real 3-node lab: each is named by ``check`` on
the node(s) at fault, with the evidence and a fix, and never passes."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from ddpnet.lab import Lab
from tests.check.labcheck import SHORT_JOIN, UNWAITED, UNWAITED_S, RankRun, run_check
from tests.lab_util import fresh_lab, requires_netns

pytestmark = [requires_netns, pytest.mark.root, pytest.mark.slow]

#: every rank here goes on at once unless a test gives rank 0 SHORT_JOIN to wait for one
FAST = UNWAITED
#: rank 0 waits (briefly) for the rank the test breaks
WAITS = {0: SHORT_JOIN}


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with fresh_lab("fld", nodes=3) as lab:
        yield lab


def _diag(runs: dict[int, RankRun]) -> str:
    return "\n".join(f"--- node {i} rc={r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}"
                     for i, r in runs.items())


def _own(run: RankRun) -> dict[str, Any]:
    cause: dict[str, Any] = run.json()["causes"][0]
    return cause


@pytest.mark.parametrize(("master", "drop"), [
    ("localhost", ()),                          # NNODES says 3 nodes
    ("127.0.0.1", ("NNODES", "NODE_RANK")),     # only LOCAL_WORLD_SIZE=1 < WORLD_SIZE=3 says so
])
def test_single_node_config_copied_to_a_cluster(clean: Lab, master: str,
                                                drop: tuple[str, ...]) -> None:
    runs = run_check(clean, FAST, per_node={i: {"MASTER_ADDR": master} for i in range(3)},
                     drop=drop, timeout=60)
    for node, run in runs.items():
        assert run.returncode == 1, _diag(runs)
        own = _own(run)
        assert own["id"] == "master-loopback", _diag(runs)
        assert own["hosts"] == [clean.nodes[node].hostname]
        assert "WORLD_SIZE=3" in own["detail"] and "export MASTER_ADDR=" in own["fix"]
        assert run.seconds < UNWAITED_S, _diag(runs)  # before anything waits
    # node 0 is rank 0's host: its fix names its own cluster address
    assert clean.nodes[0].address in _own(runs[0])["fix"]


def _cause(report: dict[str, Any], cause_id: str) -> dict[str, Any]:
    found = [c for c in report["causes"] if c["id"] == cause_id]
    assert found, (cause_id, report["causes"])
    return found[0]


def test_rank_0_hostname_loopback_on_one_worker_named_for_that_worker(clean: Lab) -> None:
    host0 = clean.nodes[0].hostname
    clean.fault("hosts-entry", 2, host=host0, address="127.0.1.1")
    assert clean.exec(2, ["getent", "hosts", host0]).stdout.split()[0] == "127.0.1.1"
    assert clean.exec(1, ["getent", "hosts", host0]).stdout.split()[0] == clean.master_addr
    runs = run_check(clean, FAST)
    report = runs[0].json()
    cause = _cause(report, "name-mismatch")
    assert cause["ranks"] == [2] and clean.nodes[2].hostname in cause["hosts"][0], _diag(runs)
    assert "127.0.1.1" in cause["detail"] and f"getent hosts {host0}" in cause["fix"]
    # MASTER_ADDR is an address, so only name-based launches (torchrun's c10d) break: a warning
    assert cause["severity"] == "warn" and report["timings"]["total"] < UNWAITED_S


def test_master_name_loopback_on_one_worker_named_at_once_by_it(clean: Lab) -> None:
    host0 = clean.nodes[0].hostname
    clean.fault("hosts-entry", 1, host=host0, address="127.0.1.1")
    runs = run_check(clean, FAST, per_node={i: {"MASTER_ADDR": host0} for i in range(3)},
                     per_node_args=WAITS)
    own = _own(runs[1])
    assert runs[1].returncode == 1 and own["id"] == "master-loopback", _diag(runs)
    assert own["hosts"] == [clean.nodes[1].hostname] and runs[1].seconds < UNWAITED_S
    assert f"MASTER_ADDR {host0} resolves to loopback 127.0.1.1" in own["detail"]
    assert f"getent hosts {host0}" in own["fix"]
    # rank 0 never passes: rank 1 is missing
    assert runs[0].returncode == 1 and _cause(runs[0].json(), "missing-ranks")["ranks"] == [1]


def test_stale_master_name_on_one_worker_named_by_it(clean: Lab) -> None:
    host0 = clean.nodes[0].hostname
    clean.fault("hosts-entry", 2, host=host0, address="198.18.0.250")  # nobody has it
    runs = run_check(clean, FAST, per_node={i: {"MASTER_ADDR": host0} for i in range(3)},
                     timeout=60, per_node_args=WAITS)
    own = _own(runs[2])
    assert runs[2].returncode == 1 and own["id"] == "master-no-route", _diag(runs)
    assert f"MASTER_ADDR {host0} (198.18.0.250)" in own["detail"]
    assert own["hosts"] == [clean.nodes[2].hostname] and runs[2].seconds < UNWAITED_S
    assert runs[0].returncode == 1  # rank 0 never passes without rank 2


def test_master_name_ipv6_on_one_worker_is_family_mismatch() -> None:
    # nodes 0 and 1 have IPv6 too, node 2 only IPv4; node 1's hosts file maps rank 0's name
    # to its IPv6 address: rank 1 joins (the store listens on both families, as torch's)
    # and advertises IPv6, which rank 2 cannot reach
    with fresh_lab("fl6", nodes=3) as lab6:  # its own lab: the addresses stay with it
        host0 = lab6.nodes[0].hostname
        for node in (0, 1):
            lab6.add_address(node, f"2001:2::{node + 1}/64")
        lab6.fault("hosts-entry", 1, host=host0, address="2001:2::1")
        runs = run_check(lab6, FAST, per_node={i: {"MASTER_ADDR": host0} for i in range(3)},
                         timeout=60)
        hostname1 = lab6.nodes[1].hostname
    report = runs[0].json()
    assert runs[0].returncode == 1 and report["root_cause"]["id"] == "family-mismatch", \
        _diag(runs)
    cause = report["root_cause"]
    assert cause["ranks"] == [1] and hostname1 in cause["hosts"][0]
    assert "IPv6 2001:2::2" in cause["detail"] and f"MASTER_ADDR {host0} resolves there to " \
        "2001:2::1" in cause["detail"]
    assert "IPv4" in cause["fix"] and report["timings"]["total"] < UNWAITED_S


_HTTP = ("import http.server, sys; http.server.HTTPServer(('0.0.0.0', int(sys.argv[1])), "
         "http.server.BaseHTTPRequestHandler).serve_forever()")
_STALE = ("import sys, time; from torch.distributed import TCPStore; "
          "s = TCPStore('0.0.0.0', int(sys.argv[1]), 2, True, wait_for_workers=False); "
          "print('up', flush=True); time.sleep(600)")


def _squat(lab: Lab, code: str, port: int) -> Any:
    """A process on node 0 listening on ``port`` (the lab kills it at the latest on down)."""
    import subprocess
    import sys

    proc = lab.popen(0, [sys.executable, "-c", code, str(port)], stdout=subprocess.PIPE,
                     stderr=subprocess.DEVNULL, text=True)
    for _ in range(100):  # until it listens
        probe = lab.exec(0, ["ss", "-Hltn", f"sport = :{port}"])
        if probe.stdout.strip():
            return proc
        import time
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("the squatter did not listen")


def _stop(proc: Any) -> None:
    proc.kill()
    proc.wait(10)


def test_another_service_on_master_port(clean: Lab) -> None:
    squatter = _squat(clean, _HTTP, 29510)
    try:
        runs = run_check(clean, FAST, timeout=60)
    finally:
        _stop(squatter)
    for node in (1, 2):  # workers: it answered, but it is not a TCPStore
        own = _own(runs[node])
        assert runs[node].returncode == 1 and own["id"] == "master-port-foreign", _diag(runs)
        assert "answered, but not a TCPStore" in own["detail"] and "HTML" in own["detail"]  # what it sent back
        assert own["hosts"] == [clean.nodes[node].hostname], _diag(runs)
        assert runs[node].seconds < UNWAITED_S, _diag(runs)
    own = _own(runs[0])  # the master: who holds it
    assert runs[0].returncode == 1 and own["id"] == "port-in-use", _diag(runs)
    assert f"pid {squatter.pid}" in own["detail"] and "http.server" in own["detail"]
    assert "another service" in own["detail"] and f"kill {squatter.pid}" in own["fix"]


def test_stale_store_of_an_old_job_on_master_port(clean: Lab) -> None:
    squatter = _squat(clean, _STALE, 29510)
    try:
        runs = run_check(clean, FAST, nodes=[0], timeout=60)
    finally:
        _stop(squatter)
    own = _own(runs[0])
    assert runs[0].returncode == 1 and own["id"] == "port-in-use", _diag(runs)
    assert "a TCPStore" in own["detail"] and f"pid {squatter.pid}" in own["detail"]
    assert runs[0].seconds < UNWAITED_S


def test_jumbo_hosts_behind_a_1500_switch_port_name_that_link(clean: Lab) -> None:
    # every node at 9000; the switch ports of nodes 0 and 1 too, node 2's stays at 1500:
    # connects and small messages pass, frames above 1500 bytes to or from node 2 vanish
    for node in range(3):
        clean.fault("mtu", node, mtu=9000)
    for node in (0, 1):
        clean.fault("port-mtu", node, mtu=9000)
    runs = run_check(clean, FAST, timeout=60)
    report = runs[0].json()
    assert runs[0].returncode == 1 and report["root_cause"]["id"] == "path-mtu", _diag(runs)
    cause = report["root_cause"]
    assert cause["ranks"] == [2] and clean.nodes[2].hostname in cause["hosts"][0]
    assert f"the link of {clean.nodes[2].hostname}" in cause["detail"]
    assert "probes of 1500 bytes crossed, 2000 did not" in cause["detail"]
    assert "mtu 1500" in cause["fix"] and "9000" in cause["fix"]
    assert report["timings"]["total"] < UNWAITED_S
    for node in (1, 2):  # every rank prints the cluster verdict
        assert runs[node].returncode == 1 and "path-mtu" in runs[node].stdout, _diag(runs)


def test_jumbo_frames_end_to_end_pass(clean: Lab) -> None:
    for node in range(3):
        clean.fault("mtu", node, mtu=9000)
        clean.fault("port-mtu", node, mtu=9000)
    runs = run_check(clean, FAST, timeout=60)
    report = runs[0].json()
    assert runs[0].returncode == 0 and report["verdict"] == "pass", _diag(runs)


def test_nccl_exclusion_that_leaves_loopback_is_named_on_every_node(clean: Lab) -> None:
    # ^docker0 leaves lo, which getifaddrs lists first: NCCL would advertise 127.0.0.1
    runs = run_check(clean, FAST, per_node={i: {"NCCL_SOCKET_IFNAME": "^docker0"}
                                            for i in range(3)}, timeout=60)
    report = runs[0].json()
    assert runs[0].returncode == 1 and report["root_cause"]["id"] == "hostname-loopback", \
        _diag(runs)
    cause = report["root_cause"]
    assert cause["ranks"] == [0, 1, 2]
    assert f"rank 2 on {clean.nodes[2].hostname}" in cause["detail"]
    assert "NCCL binds the first match in the kernel's interface order, lo (127.0.0.1)" \
        in cause["detail"]
    assert "NCCL_SOCKET_IFNAME=^docker0,lo" in cause["fix"]
    assert not [c for c in report["causes"] if c["id"] == "ifname-mismatch"]  # said once
    assert report["timings"]["total"] < UNWAITED_S


def test_nccl_prefix_picking_another_network_on_one_node_is_named(clean: Lab) -> None:
    # "eth" on every node; node 2 also has eth1 in another network, and NCCL_SOCKET_IFNAME
    # there names only eth1 by its prefix "eth1": a value valid on every node binding
    # outside the cluster subnet on one
    clean.fault("extra-iface", 2, iface="eth1")
    runs = run_check(clean, FAST, per_node={0: {"NCCL_SOCKET_IFNAME": "eth"},
                                            1: {"NCCL_SOCKET_IFNAME": "eth"},
                                            2: {"NCCL_SOCKET_IFNAME": "eth1"}}, timeout=60)
    report = runs[0].json()
    cause = _cause(report, "ifname-mismatch")
    assert cause["ranks"] == [2] and cause["severity"] == "fail", _diag(runs)
    assert "NCCL_SOCKET_IFNAME=eth1 picks eth1 198.19.254.3 (198.19.254.0/24, not the " \
        "cluster subnet 198.18.0.0/24" in cause["detail"]
    assert "export NCCL_SOCKET_IFNAME==eth0" in cause["fix"]


def test_gloo_device_list_longer_on_one_node_is_named_before_the_group_hangs(
        clean: Lab) -> None:
    clean.fault("extra-iface", 1, iface="docker0")
    runs = run_check(clean, FAST, per_node={1: {"GLOO_SOCKET_IFNAME": "eth0,docker0"}},
                     timeout=60)
    report = runs[0].json()
    assert runs[0].returncode == 1, _diag(runs)
    causes = [c for c in report["causes"] if c["id"] == "ifname-mismatch"]
    devices = next(c for c in causes if "number of devices" in c["detail"])
    assert devices["ranks"] == [1] and clean.nodes[1].hostname in devices["hosts"][0]
    assert "GLOO_SOCKET_IFNAME=eth0,docker0" in devices["detail"]
    assert len(causes) == 1, causes  # its extra device is that finding, not a network's
    assert "process_group" not in report["stages"], report["stages"]  # stopped before a hang
    assert report["timings"]["total"] < UNWAITED_S


def test_jumbo_hosts_behind_a_1500_switch_on_every_link(clean: Lab) -> None:
    for node in range(3):
        clean.fault("mtu", node, mtu=9000)
    runs = run_check(clean, FAST, timeout=90)
    report = runs[0].json()
    assert runs[0].returncode == 1 and report["root_cause"]["id"] == "path-mtu", _diag(runs)
    cause = report["root_cause"]
    assert cause["ranks"] == [0, 1, 2], _diag(runs)
    assert f"every path to {clean.nodes[0].hostname}" in cause["detail"]  # only those probed
    for node in (1, 2):  # each names its own path to rank 0, at once
        own = runs[node].json()
        assert runs[node].returncode == 1 and "path-mtu" in str(own), _diag(runs)
        assert runs[node].seconds < UNWAITED_S, _diag(runs)
    assert report["timings"]["total"] < UNWAITED_S, report["timings"]


def test_second_nic_in_the_cluster_subnet_is_named_with_why(clean: Lab) -> None:
    # an interface in the lab subnet that leads nowhere (its peer is not on the switch)
    clean.fault("extra-iface", 2, iface="eth1", address="198.18.0.202/24")
    runs = run_check(clean, FAST, timeout=60)
    report = runs[0].json()
    cause = _cause(report, "nic-same-subnet")
    assert cause["ranks"] == [2] and clean.nodes[2].hostname in cause["hosts"][0], _diag(runs)
    assert "198.18.0.0/24 on eth0, eth1" in cause["detail"]
    assert "ip addr del <its address> dev eth1" in cause["fix"]
    why = report["nodes"][2]["interface_why"]
    assert why["source"] == "auto" and "also on that subnet: eth1" in why["reason"]
    assert report["timings"]["total"] < UNWAITED_S


def test_nccls_own_choice_of_an_ipoib_interface_is_named(clean: Lab) -> None:
    # NCCL without NCCL_SOCKET_IFNAME takes ib* first: here a decoy network
    clean.fault("extra-iface", 1, iface="ib0")
    runs = run_check(clean, FAST, timeout=60)
    report = runs[0].json()
    cause = _cause(report, "nccl-auto-interface")
    assert cause["ranks"] == [1] and clean.nodes[1].hostname in cause["hosts"][0], _diag(runs)
    assert "ib0 198.19.254.2 (198.19.254.0/24, not the cluster subnet 198.18.0.0/24" \
        in cause["detail"]
    assert "export NCCL_SOCKET_IFNAME==eth0" in cause["fix"]
    assert cause["severity"] == "warn" and report["verdict"] == "pass"


def test_same_bridge_address_on_every_node_is_duplicate_address(clean: Lab) -> None:
    for node in range(3):  # docker0 at one address on every host, as Docker does
        clean.fault("extra-iface", node, iface="docker0", address="198.19.254.1/24")
    runs = run_check(clean, FAST, per_node={i: {"GLOO_SOCKET_IFNAME": "docker0"}
                                            for i in range(3)}, timeout=60)
    report = runs[0].json()
    assert runs[0].returncode == 1 and report["root_cause"]["id"] == "duplicate-address", \
        _diag(runs)
    cause = report["root_cause"]
    assert cause["ranks"] == [0, 1, 2] and "the same address 198.19.254.1" in cause["detail"]
    assert "(198.18.0.0/24)" in cause["fix"] and "GLOO_SOCKET_IFNAME=eth0" in cause["fix"]
    assert "reachability" not in report["stages"]  # each rank would have probed itself
    assert report["timings"]["total"] < UNWAITED_S


def test_master_addr_on_a_bridge_every_node_has_is_named_by_the_workers(clean: Lab) -> None:
    for node in range(3):
        clean.fault("extra-iface", node, iface="docker0", address="198.19.254.1/24")
    runs = run_check(clean, FAST, per_node={i: {"MASTER_ADDR": "198.19.254.1"}
                                            for i in range(3)}, timeout=60,
                     per_node_args=WAITS)
    for node in (1, 2):
        own = _own(runs[node])
        assert runs[node].returncode == 1 and own["id"] == "master-address-local", _diag(runs)
        assert own["hosts"] == [clean.nodes[node].hostname], _diag(runs)
        assert runs[node].seconds < UNWAITED_S, _diag(runs)
        assert "docker0" in own["detail"] and "export MASTER_ADDR=" in own["fix"]
    assert runs[0].returncode == 1  # rank 0 never passes without them
    init = clean.run([sys.executable, "-c", INIT], nodes=[1], timeout=30,
                     env={"MASTER_ADDR": "198.19.254.1", "WORLD_SIZE": "3", "RANK": "1",
                          "NODE_RANK": "1", "NNODES": "3"})[0]
    assert init.returncode == 1, (init.stdout, init.stderr[-2000:])
    assert "master-address-local" in init.stdout and "docker0" in init.stdout, init.stdout
    assert init.duration_s < UNWAITED_S, "init() names it before its 60 s wait"


#: a user's script: ddpnet.init(), the error's id and message on stdout
INIT = """
import ddpnet, sys
try:
    ddpnet.init(backend="gloo", timeout=60)
except ddpnet.errors.DdpnetError as exc:
    print(exc.error_id, exc); sys.exit(1)
"""


def test_store_through_a_vip_while_the_advertised_address_is_unreachable(clean: Lab) -> None:
    # node 2 reaches rank 0 through a VIP (DNAT, as a Kubernetes Service), and its own
    # advertised address takes no connection from its peers
    clean.fault("vip", 2, address="198.18.0.250")
    clean.fault("block-ephemeral", 2, port=29510)
    runs = run_check(clean, FAST, per_node={2: {"MASTER_ADDR": "198.18.0.250"}}, timeout=60)
    report = runs[0].json()
    assert runs[0].returncode == 1, _diag(runs)
    assert report["root_cause"]["id"] == "advertised-unreachable", report["causes"]
    cause = report["root_cause"]
    assert cause["ranks"] == [2] and clean.nodes[2].hostname in cause["hosts"][0]
    assert "reached the store at 198.18.0.250 (not an address of rank 0, which is " \
        "198.18.0.1) and advertises 198.18.0.3:" in cause["detail"]
    assert "rank(s) 0 (filtered), 1 (filtered) cannot reach" in cause["detail"]
    assert report["timings"]["total"] < UNWAITED_S
    # no ring stream to the host whose connects the mesh just saw filtered: the stage is one
    # connect timeout (3 s), not that and the stream's own 8 s (11 s before)
    assert report["timings"]["reachability"] < 8, report["timings"]


def test_own_hostname_on_a_bridge_every_node_has_is_named_for_that_node(clean: Lab) -> None:
    # check pins eth0 and its own group works, but gloo without GLOO_SOCKET_IFNAME would
    # advertise node 1's docker0 address, which every node has: a plain torchrun job hangs
    for node in range(3):
        clean.fault("extra-iface", node, iface="docker0", address="198.19.254.1/24")
    clean.fault("hosts-entry", 1, host=clean.nodes[1].hostname, address="198.19.254.1")
    runs = run_check(clean, FAST, timeout=60)
    report = runs[0].json()
    # a warning, as a hostname on 127.0.1.1 is: ddpnet.init() and a pinned interface avoid it
    assert runs[0].returncode == 0, _diag(runs)
    cause = _cause(report, "duplicate-address")
    assert cause["severity"] == "warn" and "plain init_process_group" in cause["detail"]
    assert cause["ranks"] == [1] and clean.nodes[1].hostname in cause["hosts"][0], _diag(runs)
    assert "resolves there to 198.19.254.1 (docker0)" in cause["detail"]
    assert "GLOO_SOCKET_IFNAME=eth0" in cause["fix"] and report["timings"]["total"] < UNWAITED_S


def test_unspecified_master_addr_on_one_worker_is_named_at_once_by_it(clean: Lab) -> None:
    # MASTER_ADDR=0.0.0.0 (a bind address copied from a server's config) on worker 2: its
    # connect reaches its own host, where nothing listens
    # (only that worker runs: rank 0's side of a missing rank is tested above)
    runs = run_check(clean, FAST, nodes=[2], per_node={2: {"MASTER_ADDR": "0.0.0.0"}},
                     timeout=60)
    own = _own(runs[2])
    assert runs[2].returncode == 1 and own["id"] == "master-loopback", _diag(runs)
    assert own["hosts"] == [clean.nodes[2].hostname] and runs[2].seconds < UNWAITED_S
    assert "MASTER_ADDR 0.0.0.0 is the unspecified address" in own["detail"]
