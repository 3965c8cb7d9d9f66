"""Red-team coverage of ``ddpnet check`` and ``ddpnet.init()`` against field failures (issue 18).

A catalog of lab reproductions of what breaks multi-node training in the wild, kinds 1-11 of
issue 18 with several variants each, plus healthy clusters that must pass. Each case runs the
real ``ddpnet check --json`` on every lab node (or ``ddpnet.init()`` for the init kinds) the way
a user would, and records: the expected cause id(s) vs what was named, whether the node at
fault is named (hostname or rank), whether a fix is given, whether it was a FALSE PASS (a rank
exited 0 with a pass verdict while training would break or silently use the wrong network)
and the seconds to the verdict. Writes benchmarks/results/field_coverage.json.

    sudo .venv/bin/python benchmarks/field_coverage.py [--only NAME,...] [--kind N]

Root required (network namespaces). All cases in one command take ~10 min on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# a user's check starts its own interpreter: no test zygote here (tests/zygote.py)
os.environ.setdefault("DDPNET_TEST_ZYGOTE", "0")

from tests.check.labcheck import RankRun, node_env, run_check, wait_all  # noqa: E402

from ddpnet.lab import Lab  # noqa: E402

PORT = 29510
NODES = 3
FAST = ["--no-matrix", "--join-timeout", "10", "--timeout", "20"]
Teardown = Callable[[], None] | None
Setup = Callable[[Lab], Teardown]


@dataclass
class Case:
    name: str
    kind: str  # "1".."11" (issue 18's kinds) or "healthy"
    story: str
    #: accepted cause ids (None: a healthy cluster that must pass)
    expect: tuple[str, ...] | None
    #: lab nodes at fault (their hostname or rank must be named)
    at_fault: tuple[int, ...] = ()
    #: training breaks (or silently uses the wrong network): any exit 0 is a false pass
    fatal: bool = True
    setup: Setup | None = None
    per_node: dict[int, dict[str, str]] = field(default_factory=dict)
    nodes: tuple[int, ...] | None = None
    args: tuple[str, ...] = tuple(FAST)
    #: MASTER_ADDR is rank 0's hostname (as torchrun's --master-addr often is)
    master_name: bool = False
    local: int = 0  # ddpnet check --local N on node 0 only
    init: bool = False  # ddpnet.init() instead of check
    init_timeout: float = 8.0


# ---- setups ---------------------------------------------------------------------------------

def _host(lab: Lab, node: int) -> str:
    return lab.nodes[node].hostname


def _faults(*faults: tuple[str, int, dict[str, Any]]) -> Setup:
    def setup(lab: Lab) -> Teardown:
        for kind, node, opts in faults:
            lab.fault(kind, node, **opts)
        return None
    return setup


def _hosts_entry(node: int, of: int, address: str) -> Setup:
    """On ``node``, the hostname of node ``of`` resolves to ``address``."""
    def setup(lab: Lab) -> Teardown:
        lab.fault("hosts-entry", node, host=_host(lab, of), address=address)
        return None
    return setup


def _v6(nodes: tuple[int, ...], then: Setup | None = None) -> Setup:
    """IPv6 addresses 2001:2::<i+1>/64 on the lab interface of ``nodes`` (removed after)."""
    def setup(lab: Lab) -> Teardown:
        for n in nodes:
            lab.exec(n, ["ip", "-6", "addr", "add", f"2001:2::{n + 1}/64", "dev", "eth0",
                         "nodad"])
        stop = then(lab) if then else None

        def teardown() -> None:
            if stop:
                stop()
            for n in nodes:
                lab.exec(n, ["ip", "-6", "addr", "del", f"2001:2::{n + 1}/64", "dev", "eth0"])
        return teardown
    return setup


def _chain(*setups: Setup) -> Setup:
    def setup(lab: Lab) -> Teardown:
        stops = [s(lab) for s in setups]

        def teardown() -> None:
            for stop in reversed(stops):
                if stop:
                    stop()
        return teardown
    return setup


def _sysctl(node: int, key: str, value: str) -> Setup:
    def setup(lab: Lab) -> Teardown:
        old = lab.exec(node, ["sysctl", "-n", key]).stdout.strip()
        lab.exec(node, ["sysctl", "-qw", f"{key}={value}"])

        def teardown() -> None:
            lab.exec(node, ["sysctl", "-qw", f"{key}={old}"])
        return teardown
    return setup


def _ip(node: int, *argvs: list[str]) -> Setup:
    def setup(lab: Lab) -> Teardown:
        for argv in argvs:
            lab.exec(node, ["ip", *argv])
        return None
    return setup


def _route_via_eth1(node: int) -> Setup:
    """The cluster subnet's route of eth0 demoted below eth1's (restored after)."""
    def setup(lab: Lab) -> Teardown:
        net, src = "198.18.0.0/24", lab.nodes[node].address
        lab.exec(node, ["ip", "route", "del", net, "dev", "eth0"])
        lab.exec(node, ["ip", "route", "add", net, "dev", "eth0", "src", src, "metric", "100"])

        def teardown() -> None:
            lab.exec(node, ["ip", "route", "del", net, "dev", "eth0", "metric", "100"])
            lab.exec(node, ["ip", "link", "del", "eth1"])  # its route holds the prefix
            done = lab.exec(node, ["ip", "route", "add", net, "dev", "eth0", "proto", "kernel",
                                   "scope", "link", "src", src])
            if done.returncode != 0:
                raise RuntimeError(f"could not restore node {node}'s route: {done.stderr}")
        return teardown
    return setup


_HTTP = ("import http.server, sys; http.server.HTTPServer(('0.0.0.0', int(sys.argv[1])), "
         "http.server.BaseHTTPRequestHandler).serve_forever()")
_STALE = ("import sys, time; from torch.distributed import TCPStore; "
          "s = TCPStore('0.0.0.0', int(sys.argv[1]), 2, True, wait_for_workers=False); "
          "time.sleep(600)")
_SILENT = ("import socket, sys, time; s = socket.socket(); "
           "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
           "s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen(64); time.sleep(600)")
_LOOPBACK_ONLY = ("import socket, sys, time; s = socket.socket(); "
                  "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
                  "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(64); time.sleep(600)")


def _squat(code: str, node: int = 0) -> Setup:
    """A process on ``node`` listening on MASTER_PORT (stopped after the case)."""
    def setup(lab: Lab) -> Teardown:
        proc = lab.popen(node, [sys.executable, "-c", code, str(PORT)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            if lab.exec(node, ["ss", "-Hltn", f"sport = :{PORT}"]).stdout.strip():
                break
            if proc.poll() is not None:
                raise RuntimeError(f"the squatter exited ({proc.returncode}): the case is void")
            time.sleep(0.1)
        else:
            proc.kill()
            raise RuntimeError("the squatter did not listen within 20 s: the case is void")

        def stop() -> None:
            proc.kill()
            proc.wait(10)
        return stop
    return setup


def _every(env: dict[str, str]) -> dict[int, dict[str, str]]:
    return {i: dict(env) for i in range(NODES)}


def _docker0_everywhere(lab: Lab) -> Teardown:
    for node in range(NODES):
        lab.fault("extra-iface", node, iface="docker0", address="198.19.254.1/24")
    return None


# ---- the catalog ---------------------------------------------------------------------------

CASES: list[Case] = [
    # healthy clusters: must pass (no false fail)
    Case("healthy-3-nodes", "healthy", "a plain 3-node cluster", None),
    Case("healthy-matrix", "healthy", "a plain 3-node cluster with the bandwidth matrix", None,
         args=("--matrix", "--join-timeout", "10", "--timeout", "20")),
    Case("healthy-pinned-several-nics", "healthy",
         "a decoy eth1 and docker0 on nodes, GLOO/NCCL_SOCKET_IFNAME=eth0 pinned everywhere",
         None, setup=_faults(("extra-iface", 1, {"iface": "eth1"}),
                             ("extra-iface", 2, {"iface": "docker0"})),
         per_node=_every({"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "eth0"})),
    Case("healthy-nccl-exact-and-exclusion", "healthy",
         "NCCL_SOCKET_IFNAME==eth0 on two nodes, ^lo,docker0 on the third (a decoy docker0)",
         None, setup=_faults(("extra-iface", 2, {"iface": "docker0"})),
         per_node={0: {"NCCL_SOCKET_IFNAME": "=eth0"}, 1: {"NCCL_SOCKET_IFNAME": "=eth0"},
                   2: {"NCCL_SOCKET_IFNAME": "^lo,docker0"}}),
    Case("healthy-docker0-same-address-unused", "healthy",
         "docker0 at 198.19.254.1 on every node, nothing points at it: eth0 is chosen", None,
         setup=_docker0_everywhere),
    Case("healthy-dual-stack", "healthy", "every node has IPv4 and IPv6, MASTER_ADDR IPv4",
         None, setup=_v6((0, 1, 2))),
    Case("healthy-one-machine", "healthy",
         "one machine, check --local 3 (loopback): no slow-link/slow-node warning", None,
         local=3, args=("--matrix", "--timeout", "20")),
    Case("healthy-peer-name-stale-on-one-node", "healthy",
         "node 1's name resolves to a stale address on node 2 only: gloo/NCCL exchange "
         "addresses and torchrun hands out rank 0's name only, so nothing uses it (must pass)",
         None, setup=_hosts_entry(2, 1, "198.18.0.250")),
    Case("healthy-master-addr-hostname", "healthy",
         "MASTER_ADDR=<rank 0's hostname>, resolving right everywhere", None, master_name=True),
    Case("healthy-hostnames-ipv6-everywhere", "healthy",
         "every node dual-stack and every hostname resolving to its IPv6 on its own node",
         None, setup=_v6((0, 1, 2), _chain(*[_hosts_entry(n, n, f"2001:2::{n + 1}")
                                             for n in range(NODES)]))),
    Case("healthy-jumbo-end-to-end", "healthy", "MTU 9000 on every node and switch port",
         None, setup=_faults(*[("mtu", n, {"mtu": 9000}) for n in range(NODES)],
                             *[("port-mtu", n, {"mtu": 9000}) for n in range(NODES)])),
    Case("healthy-hostnames-loopback-everywhere", "healthy",
         "a default Debian install on every node (127.0.1.1 <hostname>): one warning, "
         "no doctor-failed", None,
         setup=_faults(*[("hostname-loopback", n, {}) for n in range(NODES)])),
    Case("healthy-init", "healthy", "ddpnet.init() on a plain 3-node cluster", None, init=True),
    Case("healthy-init-own-hostname-loopback", "healthy",
         "ddpnet.init() with rank 2's own hostname at 127.0.1.1: init pins the interface",
         None, init=True, setup=_faults(("hostname-loopback", 2, {}))),
    # kind 1: name resolution is per node
    # a node's own hostname decides only what a plain init_process_group("gloo") binds:
    # ddpnet.init() and a pinned interface avoid it, so check warns (issue 29: one fact, one
    # severity), naming the node (fatal=False: a pass with that warning is no false pass)
    Case("k1-own-hostname-loopback-worker", "1",
         "Debian's 127.0.1.1 <hostname> on worker 2 only: gloo advertises loopback there",
         ("hostname-loopback",), at_fault=(2,), fatal=False,
         setup=_faults(("hostname-loopback", 2, {}))),
    Case("k1-own-hostname-loopback-rank0", "1",
         "Debian's 127.0.1.1 <hostname> on rank 0 only", ("hostname-loopback",), at_fault=(0,),
         fatal=False, setup=_faults(("hostname-loopback", 0, {}))),
    Case("k1-rank0-name-loopback-on-worker", "1",
         "rank 0's name is 127.0.1.1 on worker 2 (MASTER_ADDR an IP: torchrun c10d breaks)",
         ("name-mismatch",), at_fault=(2,), fatal=False, setup=_hosts_entry(2, 0, "127.0.1.1")),
    Case("k1-master-name-loopback-on-worker", "1",
         "MASTER_ADDR=<rank 0's name>, which is 127.0.1.1 on worker 1 only",
         ("master-loopback",), at_fault=(1,), setup=_hosts_entry(1, 0, "127.0.1.1"),
         master_name=True),
    Case("k1-master-name-stale-on-worker", "1",
         "MASTER_ADDR=<rank 0's name>, stale (198.18.0.250) on worker 2 only",
         ("master-no-route", "master-port-filtered", "name-mismatch"), at_fault=(2,),
         setup=_hosts_entry(2, 0, "198.18.0.250"), master_name=True),
    Case("k1-master-name-loopback-on-rank0", "1",
         "MASTER_ADDR=<rank 0's name>, which rank 0's own hosts file maps to 127.0.1.1",
         ("master-loopback", "hostname-loopback", "master-no-route"), at_fault=(0,),
         setup=_faults(("hostname-loopback", 0, {})), master_name=True),
    # kind 2: address families
    Case("k1-master-name-stale-on-rank0", "1",
         "MASTER_ADDR=<rank 0's name>, which rank 0's own hosts file maps to a stale address",
         ("master-no-route", "master-address-local", "port-in-use"), at_fault=(0,),
         setup=_hosts_entry(0, 0, "198.18.0.250"), master_name=True),
    Case("k2-master-name-v6-on-one-worker", "2",
         "rank 0's name resolves to its IPv6 on node 1 only, node 2 IPv4-only",
         ("family-mismatch",), at_fault=(1,),
         setup=_v6((0, 1), _hosts_entry(1, 0, "2001:2::1")),
         master_name=True),
    Case("k2-own-hostname-v6-only-on-worker", "2",
         "node 1's own hostname is AAAA-only (2001:2::2) there, node 2 IPv4-only",
         ("family-mismatch", "name-mismatch", "hostname-loopback"), at_fault=(1,), fatal=False,
         setup=_v6((0, 1), _hosts_entry(1, 1, "2001:2::2"))),
    Case("k29-dual-stack-own-hostname-v6-only", "29",
         "every node dual-stack; node 1's own hostname resolves to its IPv6 only: plain gloo "
         "binds IPv6 there, IPv4 elsewhere ('ss1.ss_family == ss2.ss_family')",
         ("family-mismatch",), at_fault=(1,), fatal=False,
         setup=_v6((0, 1, 2), _hosts_entry(1, 1, "2001:2::2"))),
    Case("k29-master-name-sent-to-a-worker", "29",
         "MASTER_ADDR=<rank 0's name>; node 2's hosts file has a stale line sending it to node "
         "1's address (a worker: refused)", ("master-port-refused",), at_fault=(2,),
         setup=_hosts_entry(2, 0, "198.18.0.2"), master_name=True),
    Case("k2-master-v6-literal-v4-only-peer", "2",
         "MASTER_ADDR=2001:2::1 (a v6 literal) while node 2 has no IPv6",
         ("family-mismatch", "master-no-route"), at_fault=(2,), setup=_v6((0, 1)),
         per_node=_every({"MASTER_ADDR": "2001:2::1"})),
    Case("k2-gloo-iface-v6-only-on-worker", "2",
         "GLOO_SOCKET_IFNAME=eth1 on node 2, an interface with only IPv6 (no IPv4 peer path)",
         ("ifname-no-address", "ifname-mismatch", "interface-mismatch", "family-mismatch"),
         at_fault=(2,),
         setup=_chain(_faults(("extra-iface", 2, {"iface": "eth1"})),
                      _ip(2, ["-4", "addr", "flush", "dev", "eth1"],
                          ["-6", "addr", "add", "2001:2:1::3/64", "dev", "eth1", "nodad"])),
         per_node={2: {"GLOO_SOCKET_IFNAME": "eth1"}}),
    # kind 3: single-node config copied to a cluster
    Case("k3-localhost-on-one-worker", "3", "MASTER_ADDR=localhost on worker 2 only",
         ("master-loopback",), at_fault=(2,), per_node={2: {"MASTER_ADDR": "localhost"}}),
    Case("k3-127.0.0.2-on-one-worker", "3", "MASTER_ADDR=127.0.0.2 on worker 1 only",
         ("master-loopback",), at_fault=(1,), per_node={1: {"MASTER_ADDR": "127.0.0.2"}}),
    Case("k3-v6-loopback-on-one-worker", "3", "MASTER_ADDR=::1 on worker 1 only",
         ("master-loopback",), at_fault=(1,), per_node={1: {"MASTER_ADDR": "::1"}}),
    Case("k3-any-address-on-one-worker", "3",
         "MASTER_ADDR=0.0.0.0 on worker 2 (connects to its own host)", ("master-loopback",
                                                                         "master-no-route"),
         at_fault=(2,), per_node={2: {"MASTER_ADDR": "0.0.0.0"}}),
    Case("k3-localhost-on-rank0-only", "3", "MASTER_ADDR=localhost on rank 0 only",
         ("master-loopback",), at_fault=(0,), per_node={0: {"MASTER_ADDR": "localhost"}}),
    Case("k3-localhost-everywhere-no-nnodes", "3",
         "MASTER_ADDR=127.0.0.1 everywhere, only WORLD_SIZE > LOCAL_WORLD_SIZE tells",
         ("master-loopback",), at_fault=(0, 1, 2),
         per_node=_every({"MASTER_ADDR": "127.0.0.1", "NNODES": "", "NODE_RANK": ""})),
    # kind 5: something else on MASTER_PORT
    Case("k5-http-server-on-master-port", "5", "a web server holds MASTER_PORT on rank 0",
         ("master-port-foreign", "port-in-use"), at_fault=(0,), setup=_squat(_HTTP)),
    Case("k5-stale-store-of-old-job", "5",
         "a TCPStore of an old job still holds MASTER_PORT on rank 0, seen from workers too",
         ("port-in-use", "master-port-foreign"), at_fault=(0,), setup=_squat(_STALE)),
    Case("k5-silent-listener-on-master-port", "5",
         "a process listens on MASTER_PORT and never answers (accepts, reads nothing)",
         ("port-in-use", "master-port-foreign"), at_fault=(0,), setup=_squat(_SILENT)),
    Case("k5-loopback-service-on-master-port", "5",
         "a local service holds 127.0.0.1:MASTER_PORT on rank 0: torch's store binds every "
         "address and fails with EADDRINUSE", ("port-in-use",), at_fault=(0,),
         setup=_squat(_LOOPBACK_ONLY)),
    Case("k5-master-port-filtered", "5", "a firewall on rank 0 drops MASTER_PORT",
         ("master-port-filtered", "missing-ranks"), at_fault=(0,),
         setup=_faults(("block-port", 0, {"port": PORT}))),
    Case("k5-master-port-rejected", "5", "a firewall on rank 0 rejects MASTER_PORT (RST)",
         ("master-port-refused", "missing-ranks"), at_fault=(0,),
         setup=_faults(("block-port", 0, {"port": PORT, "reject": True}))),
    Case("k5-master-never-started", "5", "rank 0 never starts: workers see refused",
         ("master-port-refused",), at_fault=(0,), nodes=(1, 2)),
    Case("k5-master-port-differs-on-one-worker", "5",
         "MASTER_PORT=29511 on worker 2 only (refused there; rank 0 misses it)",
         ("master-port-refused", "master-port-mismatch", "missing-ranks"), at_fault=(2,),
         per_node={2: {"MASTER_PORT": "29511"}}),
    # kind 6: several NICs
    Case("k6-second-nic-same-subnet-worker", "6",
         "node 2 has a second NIC in the cluster subnet that leads nowhere",
         ("nic-same-subnet",), at_fault=(2,), fatal=False,
         setup=_faults(("extra-iface", 2, {"iface": "eth1", "address": "198.18.0.202/24"}))),
    Case("k6-second-nic-same-subnet-rp-filter", "6",
         "node 1: two NICs in one subnet with rp_filter=1 (strict): replies dropped",
         ("nic-same-subnet",), at_fault=(1,), fatal=False,
         setup=_chain(_faults(("extra-iface", 1, {"iface": "eth1",
                                                  "address": "198.18.0.201/24"})),
                      _sysctl(1, "net.ipv4.conf.all.rp_filter", "1"),
                      _sysctl(1, "net.ipv4.conf.eth0.rp_filter", "1"))),
    Case("k6-second-nic-same-subnet-rank0", "6",
         "rank 0 has a second NIC in the cluster subnet", ("nic-same-subnet",), at_fault=(0,),
         fatal=False,
         setup=_faults(("extra-iface", 0, {"iface": "eth1", "address": "198.18.0.200/24"}))),
    Case("k6-second-nic-same-subnet-takes-the-route", "6",
         "node 1: a dead second NIC in the cluster subnet whose route wins (lower metric)",
         ("nic-same-subnet", "master-no-route", "master-port-filtered"), at_fault=(1,),
         setup=_chain(_faults(("extra-iface", 1, {"iface": "eth1",
                                                  "address": "198.18.0.201/24"})),
                      _route_via_eth1(1))),
    Case("k6-ib-decoy-nccl-auto", "6",
         "an ib0 on another network on node 1: NCCL's own choice takes it",
         ("nccl-auto-interface",), at_fault=(1,), fatal=False,
         setup=_faults(("extra-iface", 1, {"iface": "ib0"}))),
    Case("k6-down-nic-sorting-first", "6",
         "node 2: a NIC 'bond0' in another network, administratively down, NCCL_SOCKET_IFNAME "
         "=bond on that node", ("ifname-down", "ifname-no-address", "ifname-mismatch"),
         at_fault=(2,),
         setup=_chain(_faults(("extra-iface", 2, {"iface": "bond0"})),
                      _ip(2, ["link", "set", "bond0", "down"])),
         per_node={2: {"NCCL_SOCKET_IFNAME": "bond"}}),
    Case("k6-slow-node", "6", "node 2's link at 100 Mbit/s (a slow management network)",
         ("slow-node", "slow-link"), at_fault=(2,), fatal=False,
         setup=_faults(("rate", 2, {"rate": "100mbit"})),
         args=("--matrix", "--join-timeout", "10", "--timeout", "20")),
    # kind 7: container networking
    Case("k7-docker0-same-address-gloo-pinned", "7",
         "docker0 at one address on every node and GLOO_SOCKET_IFNAME=docker0",
         ("duplicate-address",), at_fault=(0, 1, 2), setup=_docker0_everywhere,
         per_node=_every({"GLOO_SOCKET_IFNAME": "docker0"})),
    Case("k7-master-addr-on-docker0", "7",
         "docker0 at one address on every node and MASTER_ADDR is that address",
         ("master-address-local",), at_fault=(1, 2), setup=_docker0_everywhere,
         per_node=_every({"MASTER_ADDR": "198.19.254.1"})),
    Case("k7-hostname-on-docker0-one-node", "7",
         "docker0 at one address everywhere; node 1's hostname maps to it there (gloo "
         "advertises the bridge address)", ("duplicate-address", "name-mismatch",
                                            "hostname-loopback"), at_fault=(1,), fatal=False,
         setup=_chain(_docker0_everywhere, _hosts_entry(1, 1, "198.19.254.1"))),
    Case("k7-master-addr-on-docker0-rank-only", "7",
         "docker0 at one address everywhere, MASTER_ADDR on it, and only RANK/WORLD_SIZE "
         "set (no NODE_RANK to tell a worker it is not rank 0's node)",
         ("master-address-local", "master-loopback"), at_fault=(1, 2),
         setup=_docker0_everywhere,
         per_node=_every({"MASTER_ADDR": "198.19.254.1", "NNODES": "", "NODE_RANK": ""})),
    # kind 8: interface variables as the libraries read them
    Case("k8-gloo-lo-on-one-worker", "8", "GLOO_SOCKET_IFNAME=lo on worker 1",
         ("hostname-loopback",), at_fault=(1,), per_node={1: {"GLOO_SOCKET_IFNAME": "lo"}}),
    Case("k8-nccl-excludes-the-real-one", "8",
         "NCCL_SOCKET_IFNAME=^eth0 on node 2 (a copied exclusion): NCCL keeps docker0/lo",
         ("hostname-loopback", "ifname-mismatch", "ifname-no-address"), at_fault=(2,),
         setup=_faults(("extra-iface", 2, {"iface": "docker0"})),
         per_node={2: {"NCCL_SOCKET_IFNAME": "^eth0"}}),
    Case("k8-gloo-ifname-missing-on-one-host", "8",
         "GLOO_SOCKET_IFNAME=eth1 everywhere, but only nodes 0 and 1 have eth1",
         ("ifname-missing", "ifname-mismatch", "interface-mismatch"), at_fault=(2,),
         setup=_faults(("extra-iface", 0, {"iface": "eth1", "address": "198.19.253.1/24"}),
                       ("extra-iface", 1, {"iface": "eth1", "address": "198.19.253.2/24"})),
         per_node=_every({"GLOO_SOCKET_IFNAME": "eth1"})),
    Case("k8-nccl-ifname-missing-on-one-host", "8",
         "NCCL_SOCKET_IFNAME=ens5 on node 2 (no such interface), eth0 elsewhere",
         ("ifname-missing", "ifname-mismatch"), at_fault=(2,),
         per_node={0: {"NCCL_SOCKET_IFNAME": "eth0"}, 1: {"NCCL_SOCKET_IFNAME": "eth0"},
                   2: {"NCCL_SOCKET_IFNAME": "ens5"}}),
    Case("k8-nccl-exclusion-leaves-lo", "8",
         "NCCL_SOCKET_IFNAME=^docker0 everywhere: lo is left first",
         ("hostname-loopback", "ifname-mismatch"), at_fault=(0, 1, 2),
         per_node=_every({"NCCL_SOCKET_IFNAME": "^docker0"})),
    Case("k8-nccl-prefix-other-network", "8",
         "NCCL_SOCKET_IFNAME=eth1 on node 2 picks a decoy network",
         ("ifname-mismatch",), at_fault=(2,),
         setup=_faults(("extra-iface", 2, {"iface": "eth1"})),
         per_node={0: {"NCCL_SOCKET_IFNAME": "eth"}, 1: {"NCCL_SOCKET_IFNAME": "eth"},
                   2: {"NCCL_SOCKET_IFNAME": "eth1"}}),
    Case("k8-gloo-docker0-on-one-node", "8",
         "GLOO_SOCKET_IFNAME=docker0 on node 1 only: it advertises a bridge nobody reaches",
         ("ifname-mismatch", "interface-mismatch", "peer-port-blocked"), at_fault=(1,),
         setup=_faults(("extra-iface", 1, {"iface": "docker0"})),
         per_node={1: {"GLOO_SOCKET_IFNAME": "docker0"}}),
    Case("k8-tp-ifname-missing", "8", "TP_SOCKET_IFNAME=ens5 on node 1 (no such interface)",
         ("ifname-missing", "ifname-mismatch"), at_fault=(1,), fatal=False,
         per_node={1: {"TP_SOCKET_IFNAME": "ens5"}}),
    Case("k8-gloo-device-list-longer", "8",
         "GLOO_SOCKET_IFNAME=eth0,docker0 on node 1 only (gloo's device count differs)",
         ("ifname-mismatch",), at_fault=(1,),
         setup=_faults(("extra-iface", 1, {"iface": "docker0"})),
         per_node={1: {"GLOO_SOCKET_IFNAME": "eth0,docker0"}}),
    # kind 9: path MTU
    Case("k9-jumbo-behind-1500-port-worker", "9",
         "every node at 9000, node 2's switch port at 1500", ("path-mtu",), at_fault=(2,),
         setup=_faults(*[("mtu", n, {"mtu": 9000}) for n in range(NODES)],
                       ("port-mtu", 0, {"mtu": 9000}), ("port-mtu", 1, {"mtu": 9000}))),
    Case("k9-jumbo-behind-1500-port-rank0", "9",
         "every node at 9000, rank 0's switch port at 1500", ("path-mtu",), at_fault=(0,),
         setup=_faults(*[("mtu", n, {"mtu": 9000}) for n in range(NODES)],
                       ("port-mtu", 1, {"mtu": 9000}), ("port-mtu", 2, {"mtu": 9000}))),
    Case("k9-one-node-jumbo", "9", "node 1 alone at MTU 9000 on a 1500 switch",
         ("mtu-mismatch", "path-mtu"), at_fault=(1,),
         setup=_faults(("mtu", 1, {"mtu": 9000}))),
    # kind 10: init() fails fast
    Case("k10-init-rank0-peers-never-come", "10",
         "ddpnet.init() on rank 0 only (WORLD_SIZE=3): names ranks 1, 2 within its timeout",
         ("missing-ranks",), at_fault=(1, 2), init=True, nodes=(0,)),
    Case("k10-init-worker-master-never-comes", "10",
         "ddpnet.init() on worker 1 only: rank 0 never starts", ("master-port-refused",),
         at_fault=(0,), init=True, nodes=(1,)),
    Case("k10-init-one-worker-never-comes", "10",
         "ddpnet.init() on nodes 0 and 1, node 2 never starts", ("missing-ranks",),
         at_fault=(2,), init=True, nodes=(0, 1)),
    Case("k10-init-master-port-filtered", "10",
         "ddpnet.init(): rank 0's firewall drops MASTER_PORT",
         ("master-port-filtered", "missing-ranks"), at_fault=(0,), init=True,
         setup=_faults(("block-port", 0, {"port": PORT}))),
    Case("k10-init-world-size-mismatch", "10",
         "ddpnet.init() with WORLD_SIZE=4 on node 2 (a stale launcher line)",
         ("world-size-mismatch", "missing-ranks"), at_fault=(2,), init=True,
         per_node={2: {"WORLD_SIZE": "4"}}),
    Case("k10-init-duplicate-rank", "10",
         "ddpnet.init() with RANK=1 on nodes 1 and 2 (a copied launcher line)",
         ("duplicate-rank", "missing-ranks", "world-size-mismatch"), at_fault=(2,),
         init=True, per_node={2: {"RANK": "1"}}),
    Case("k10-init-localhost-on-worker", "10",
         "ddpnet.init() with MASTER_ADDR=localhost on worker 2 (preflight: the lead's part)",
         ("master-loopback",), at_fault=(2,), init=True,
         per_node={2: {"MASTER_ADDR": "localhost"}}),
    # kind 11: one machine
    Case("k11-one-machine-slow-cpu", "11",
         "check --local 3 --matrix on one loaded machine: no slow-link warning over loopback",
         None, local=3, args=("--matrix", "--bw-seconds", "0.3", "--timeout", "20")),
    # issue 29: the root cause follows the evidence (the kernel's path, the firewall read,
    # ARP); a static route missing on one node needs a routed lab:
    # tests/check/test_lab_routed_paths.py
    Case("i29-twin-nic-strict-rp-filter-pinned", "29",
         "node 1: a second NIC in the subnet wins the route, rp_filter=1, arp_ignore=1, and "
         "the job pins eth0 there: peers' connections dropped by the kernel (no firewall)",
         ("reverse-path-drop",), at_fault=(1,),
         setup=_faults(("twin-nic", 1, {"address": "198.18.0.202/24"})),
         per_node={1: {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "eth0"}}),
    Case("i29-twin-nic-strict-rp-filter-plain-job", "29",
         "the same, unpinned: check binds eth1 (the route's) and works, a plain gloo job binds "
         "the hostname's address on eth0 and hangs", ("reverse-path-drop",), at_fault=(1,),
         fatal=False, setup=_faults(("twin-nic", 1, {"address": "198.18.0.202/24"}))),
    Case("i29-policy-route-replies-by-another-nic", "29",
         "node 1: `ip rule from <its address> lookup 100`, table 100 routing out wan0",
         ("asymmetric-route",), at_fault=(1,), setup=_faults(("policy-route", 1, {}))),
    Case("i29-firewall-rejects-ephemeral", "29",
         "node 1's firewall rejects (TCP reset) all but MASTER_PORT and 29400",
         ("peer-port-blocked",), at_fault=(1,),
         setup=_faults(("block-ephemeral", 1, {"port": PORT, "reject": True}))),
    Case("i29-duplicate-address", "29", "node 2 comes up with node 1's address",
         ("duplicate-address",), at_fault=(1,),
         setup=_faults(("address", 2, {"address": "198.18.0.2/24"}))),
    Case("i29-loss-5-percent", "29", "node 2 loses 5 % of the packets it sends",
         ("packet-loss",), at_fault=(2,), setup=_faults(("loss", 2, {"percent": 5}))),
]


# ---- running ---------------------------------------------------------------------------------

_INIT = r"""
import json, os, sys, time
t0 = time.monotonic()
out = {}
try:
    import ddpnet
    from ddpnet.errors import DdpnetError, RendezvousError
    ddpnet.init(connect_timeout=float(sys.argv[1]))
    import torch, torch.distributed as dist
    t = torch.ones(1); dist.all_reduce(t)
    out = {"ok": t.item() == int(os.environ["WORLD_SIZE"])}
except RendezvousError as exc:
    out = {"ok": False, "cause": exc.cause, "host": exc.host, "rank": exc.rank,
           "message": str(exc), "hint": exc.hint, "detail": exc.detail}
except DdpnetError as exc:
    out = {"ok": False, "cause": exc.error_id, "message": str(exc), "hint": exc.hint}
except Exception as exc:
    out = {"ok": False, "cause": None, "message": f"{type(exc).__name__}: {exc}"[:400]}
out["seconds"] = round(time.monotonic() - t0, 2)
print(json.dumps(out), flush=True)
os._exit(0 if out.get("ok") else 1)
"""


def _env_for(case: Case, lab: Lab) -> dict[int, dict[str, str]]:
    env = {n: dict(e) for n, e in case.per_node.items()}
    if case.master_name:
        for n in range(NODES):
            env.setdefault(n, {})["MASTER_ADDR"] = _host(lab, 0)
    return env


def _drop(env: dict[int, dict[str, str]]) -> tuple[dict[int, dict[str, str]], list[str]]:
    """An empty value means unset (NNODES="" drops it)."""
    drop = sorted({k for e in env.values() for k, v in e.items() if v == ""})
    return {n: {k: v for k, v in e.items() if v != ""} for n, e in env.items()}, drop


def run_init(lab: Lab, case: Case, env: dict[int, dict[str, str]]) -> dict[int, RankRun]:
    chosen = list(case.nodes) if case.nodes is not None else list(range(NODES))
    procs = {}
    for idx in chosen:
        e = node_env(lab, idx, rank=idx, world=NODES, port=PORT, extra=env.get(idx))
        e["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
        procs[idx] = lab.popen(idx, [sys.executable, "-c", _INIT, str(case.init_timeout)],
                               env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               cwd=tempfile.gettempdir())  # init's watch writes its report
    return wait_all(procs, case.init_timeout * 4 + 60)


def run_local(lab: Lab, case: Case) -> dict[int, RankRun]:
    started = time.monotonic()
    argv = [sys.executable, "-m", "ddpnet", "check", "--json", "--local", str(case.local),
            *case.args]
    p = lab.exec(0, argv, env={"PYTHONWARNINGS": "ignore"}, timeout=180)
    return {0: RankRun(0, p.returncode, p.stdout, p.stderr, time.monotonic() - started)}


def _parse(run: RankRun) -> dict[str, Any]:
    try:
        text = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
        data = json.loads(run.stdout) if run.stdout.strip().startswith("{") and \
            run.stdout.count("\n") > 1 else json.loads(text)
    except (ValueError, IndexError):
        return {}
    return data if isinstance(data, dict) else {}


def _init_causes(data: dict[str, Any]) -> list[dict[str, Any]]:
    if not data or data.get("ok") or not data.get("cause"):
        return []
    ranks = [data["rank"]] if isinstance(data.get("rank"), int) else []
    return [{"id": data["cause"], "severity": "fail", "hosts": [data.get("host") or ""],
             "ranks": ranks, "detail": f"{data.get('message', '')} {data.get('detail', '')}",
             "fix": data.get("hint") or ""}]


def _verdict(case: Case, data: dict[str, Any]) -> str | None:
    """pass/fail of one rank's output: rank 0's report, a worker's {"ok": ...} line, or
    init()'s outcome."""
    if case.init or ("verdict" not in data and "ok" in data):
        return "pass" if data.get("ok") else "fail"
    verdict = data.get("verdict")
    return str(verdict) if verdict else None


_RANKS = re.compile(r"\branks?(?:\(s\))? ((?:\d+(?:, ?| and |,))*\d+)")


def _mentions(cause: dict[str, Any], lab: Lab, node: int) -> bool:
    """Does ``cause`` name the node: its hostname or address in hosts or text, or its rank
    (the lab runs rank i on node i) in ranks or text ("rank 2", "rank(s) 1, 2")?"""
    host, address = _host(lab, node), lab.nodes[node].address
    if node in cause.get("ranks", []) or any(host in h for h in cause.get("hosts", [])):
        return True
    text = f"{cause.get('detail', '')}"
    if host in text or re.search(rf"\b{re.escape(address)}\b", text):
        return True
    return any(str(node) in re.split(r"\D+", m) for m in _RANKS.findall(text))


def evaluate(case: Case, lab: Lab, runs: dict[int, RankRun]) -> dict[str, Any]:
    per_rank = {}
    named_causes: list[dict[str, Any]] = []
    any_pass = False
    verdict_times = []
    for idx, run in runs.items():
        data = _parse(run)
        causes = _init_causes(data) if case.init else list(data.get("causes", []))
        verdict = _verdict(case, data)
        passed = run.returncode == 0 and verdict == "pass"
        any_pass |= passed
        per_rank[idx] = {"exit": run.returncode, "verdict": verdict,
                         "causes": [c["id"] for c in causes], "seconds": round(run.seconds, 2)}
        hits = [c for c in causes if case.expect and c["id"] in case.expect]
        if hits:
            verdict_times.append(run.seconds)
        named_causes += hits
        if not data:
            per_rank[idx]["stderr_tail"] = run.stderr[-300:]
    row: dict[str, Any] = {"name": case.name, "kind": case.kind, "story": case.story,
                           "expected": list(case.expect) if case.expect else None,
                           "ranks": per_rank}
    if case.expect is None:  # healthy: every rank passes, no warning about links on one host
        warns = sorted({c for r in per_rank.values() for c in r["causes"]})
        row.update(ok=all(r["exit"] == 0 for r in per_rank.values()), warnings=warns,
                   false_fail=not all(r["exit"] == 0 for r in per_rank.values()),
                   seconds=round(max(r.seconds for r in runs.values()), 2))
        if case.local and any(w in ("slow-link", "slow-node") for w in warns):
            row["ok"] = False
        return row
    named = bool(named_causes)
    host_named = named and all(any(_mentions(c, lab, n) for c in named_causes)
                               for n in case.at_fault)
    hint = any(c.get("fix") for c in named_causes)
    false_pass = any_pass and (case.fatal or not named)
    row.update(named=named, named_ids=sorted({c["id"] for c in named_causes}),
               host_named=host_named, hint=hint, false_pass=false_pass,
               ok=named and host_named and hint and not false_pass,
               seconds=round(min(verdict_times), 2) if verdict_times else None,
               example=(named_causes[0]["detail"][:300] if named_causes else None))
    return row


def run_case(lab: Lab, case: Case) -> dict[str, Any]:
    lab.clear()
    stop = case.setup(lab) if case.setup else None
    try:
        env, drop = _drop(_env_for(case, lab))
        if case.local:
            runs = run_local(lab, case)
        elif case.init:
            runs = run_init(lab, case, env)
        else:
            runs = run_check(lab, list(case.args), nodes=case.nodes, port=PORT, per_node=env,
                             drop=drop, timeout=90)
    finally:
        if stop is not None:
            stop()
        lab.clear()
    return evaluate(case, lab, runs)


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    faults = [r for r in rows if r["expected"] is not None and "void" not in r]
    healthy = [r for r in rows if r["expected"] is None and "void" not in r]
    ok = [r for r in faults if r["ok"]]
    by_kind: dict[str, list[int]] = {}
    for r in faults:
        by_kind.setdefault(r["kind"], [0, 0])
        by_kind[r["kind"]][0] += int(r["ok"])
        by_kind[r["kind"]][1] += 1
    return {
        "fault_cases": len(faults),
        "named_with_host_and_fix": len(ok),
        "named_pct": round(100 * len(ok) / len(faults), 1) if faults else None,
        "named_any_pct": round(100 * sum(r["named"] for r in faults) / len(faults), 1)
        if faults else None,
        "false_passes": [r["name"] for r in faults if r["false_pass"]],
        "false_pass_count": sum(r["false_pass"] for r in faults),
        "gaps": [r["name"] for r in faults if not r["ok"]],
        "void_cases": [r["name"] for r in rows if "void" in r],
        "healthy_cases": len(healthy),
        "false_fails": [r["name"] for r in healthy if not r["ok"]],
        "by_kind": {k: f"{v[0]}/{v[1]}" for k, v in sorted(by_kind.items(),
                                                          key=lambda kv: (len(kv[0]), kv[0]))},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", default=None, help="comma-separated case names")
    ap.add_argument("--kind", default=None, help="comma-separated kinds (1-11, healthy)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/field_coverage.json"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces)", file=sys.stderr)
        return 3
    chosen = [c for c in CASES
              if (not args.only or c.name in args.only.split(","))
              and (not args.kind or c.kind in args.kind.split(","))]
    load_before = os.getloadavg()
    t0 = time.monotonic()
    rows = []
    with Lab(name=f"fcv{os.getpid()}", nodes=NODES, rate="1gbit") as lab:
        for case in chosen:
            try:
                row = run_case(lab, case)
            except RuntimeError as exc:  # the reproduction itself did not come up
                lab.clear()
                row = {"name": case.name, "kind": case.kind, "story": case.story,
                       "expected": list(case.expect) if case.expect else None, "void": str(exc),
                       "ok": False, "named": False, "host_named": False, "hint": False,
                       "false_pass": False, "false_fail": False, "seconds": None}
            rows.append(row)
            print(f"{'ok ' if row['ok'] else 'GAP'} {case.name:40s} "
                  f"{row.get('seconds')}s named={row.get('named_ids', row.get('warnings'))} "
                  f"host={row.get('host_named')} false_pass={row.get('false_pass')}",
                  flush=True)
    out = {
        "benchmark": "field_coverage",
        "lab": {"nodes": NODES, "rate": "1gbit"},
        "measured": "each case: the real `ddpnet check --json` on every lab node (or "
                    "ddpnet.init()), expected cause vs named, node at fault named, fix given, "
                    "false pass (a rank exiting 0 with a pass verdict while training breaks), "
                    "seconds from the last rank starting to the first rank naming it",
        "host": {"cpus": os.cpu_count(), "load_avg_before": load_before,
                 "load_avg_after": os.getloadavg(), "python": platform.python_version()},
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "wall_s": round(time.monotonic() - t0, 1),
        "summary": summary(rows),
        "results": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out["summary"], indent=2))
    return 0 if not out["summary"]["false_pass_count"] and not out["summary"]["false_fails"] \
        else 1


if __name__ == "__main__":
    sys.exit(main())
