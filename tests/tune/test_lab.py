"""Real proof in ``ddpnet lab`` nodes (network namespaces):

- the rendered nftables and iptables rules, applied by the real apply/revert engine inside
  node 0, let a node inside the cluster subnet reach MASTER_PORT and an ephemeral port and
  keep a node outside it (an extra address from ``lab.add_address``) out; a port the rules do
  not cover stays reachable, and after revert the outside node gets in again;
- the same over IPv6 (addresses added to the lab interfaces with ``ip -6 addr``: the lab
  itself plans IPv4 only): an IPv4 subnet's rules keep every IPv6 peer off the training
  ports (ip6tables beside iptables, nftables' inet table), an IPv6 subnet's admit it;
- the rendered sysctl file loads with ``sysctl -p`` for the per-namespace keys.
"""

from __future__ import annotations

import ipaddress
import json
import sys
import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from ddpnet.lab import Lab
from ddpnet.tune import apply as ap
from ddpnet.tune.model import Plan
from ddpnet.tune.plan import build_plan, build_request
from ddpnet.tune.sysctl import profile_for, render_file
from tests.lab_util import fresh_lab, requires_netns
from tests.tune.fixtures import FACTS

pytestmark = [requires_netns, pytest.mark.root]

MASTER_PORT = 29510
EPHEMERAL = (50000, 50100)
IN_RANGE = 50050  # an ephemeral port gloo/NCCL could listen on
UNCOVERED = 40000  # outside what the rules cover: must stay open
OUTSIDE = "198.18.0.200"
#: IPv6: node i is V6_PREFIX + (i+1), on one /64 link; the cluster is the first /120 of it
V6_PREFIX = "fd00:dd0e::"
CLUSTER6 = "fd00:dd0e::/120"
OUTSIDE6 = "fd00:dd0e::1:200"

SERVER = textwrap.dedent("""
    import socket, sys, threading
    def serve(port):
        s = socket.socket(socket.AF_INET6); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # IPv4 and IPv6
        s.bind(("::", port)); s.listen(64)
        while True:
            c, _ = s.accept(); c.close()
    for p in sys.argv[1:]:
        threading.Thread(target=serve, args=(int(p),), daemon=True).start()
    print("ready", flush=True)
    threading.Event().wait()
""")

CLIENT = textwrap.dedent("""
    import socket, sys
    host, port, src = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    try:
        socket.create_connection((host, port), timeout=1.5, source_address=(src, 0)).close()
    except OSError as exc:
        print(type(exc).__name__, exc); sys.exit(1)
""")


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with fresh_lab("tn", nodes=3) as lab:
        lab.add_address(2, f"{OUTSIDE}/24")
        for i, node in enumerate(lab.nodes):
            for addr in (v6(i), *([OUTSIDE6] if i == 2 else [])):
                lab.exec(i, ["ip", "-6", "addr", "add", f"{addr}/64", "dev", node.ifname,
                             "nodad"])
        server = lab.popen(0, [sys.executable, "-c", SERVER, str(MASTER_PORT), str(IN_RANGE),
                               str(UNCOVERED)], stdout=-1, text=True)
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        yield lab


def cluster_subnet(lab: Lab) -> str:
    """A subnet holding every node's address but not OUTSIDE (all in the lab's /24)."""
    net = ipaddress.ip_network("198.18.0.0/25")
    assert all(ipaddress.ip_address(n.address) in net for n in lab.nodes)
    assert ipaddress.ip_address(OUTSIDE) not in net
    return str(net)


def v6(node: int) -> str:
    return f"{V6_PREFIX}{node + 1}"


def has_ipv6(lab: Lab) -> bool:
    return v6(1) in lab.exec(1, ["ip", "-6", "addr", "show"]).stdout


def reach(lab: Lab, node: int, src: str, port: int, target: str | None = None) -> bool:
    proc = lab.exec(node, [sys.executable, "-c", CLIENT, target or lab.master_addr, str(port),
                           src], timeout=30)
    return proc.returncode == 0


def matrix(lab: Lab, family: int = 4) -> dict[tuple[str, int], bool]:
    if family == 6:
        target, inside, outside = v6(0), v6(1), OUTSIDE6
    else:
        target, inside, outside = lab.master_addr, lab.nodes[1].address, OUTSIDE
    return {(who, port): reach(lab, node, src, port, target)
            for who, node, src in (("inside", 1, inside), ("outside", 2, outside))
            for port in (MASTER_PORT, IN_RANGE, UNCOVERED)}


def firewall_only(plan: Plan) -> Plan:
    part = plan.part("firewall")
    assert part is not None and part.files
    return replace(plan, parts=(part,))


def node_runner(lab: Lab, root: Path) -> ap.Runner:
    """Run a plan's commands inside node 0; /etc paths point into the temp root."""

    def run(argv: Sequence[str]) -> tuple[int, str]:
        argv = [str(root / a.lstrip("/")) if a.startswith("/etc/") else a for a in argv]
        proc = lab.exec(0, argv, timeout=30)
        return proc.returncode, proc.stdout + proc.stderr

    return run


@pytest.mark.parametrize("firewall", ["nftables", "iptables"])
def test_rules_admit_the_subnet_only(lab: Lab, tmp_path: Path, firewall: str) -> None:
    open_all = {(w, p): True for w in ("inside", "outside")
                for p in (MASTER_PORT, IN_RANGE, UNCOVERED)}
    assert matrix(lab) == open_all  # control: without rules everyone gets in
    req = build_request(distro="debian", firewall=firewall, profile="guide",
                        master_port=MASTER_PORT, cluster_subnet=cluster_subnet(lab),
                        port_range=f"{EPHEMERAL[0]}-{EPHEMERAL[1]}")
    plan = firewall_only(build_plan(req, FACTS))
    run = node_runner(lab, tmp_path)
    try:
        out = ap.apply(plan, tmp_path, run, live=True)
        assert not out.failed and any(c["status"] == "ran" for c in out.commands)
        assert matrix(lab) == {**open_all, ("outside", MASTER_PORT): False,
                               ("outside", IN_RANGE): False}
        again = ap.apply(plan, tmp_path, run, live=True)  # idempotent
        assert not again.changed
    finally:
        ap.revert(tmp_path, run, live=True)
    assert matrix(lab) == open_all
    rules = lab.exec(0, ["nft", "list", "ruleset"]).stdout
    assert "ddpnet" not in rules and "DDPNET" not in rules  # removed what it added


@pytest.mark.parametrize("firewall", ["nftables", "iptables"])
@pytest.mark.parametrize("family", [4, 6])
def test_rules_gate_ipv6_too(lab: Lab, tmp_path: Path, firewall: str, family: int) -> None:
    """An IPv4 subnet's rules close the training ports to every IPv6 peer (before ip6tables
    rules were rendered, IPv6 got around iptables); an IPv6 subnet's admit its own IPv6
    peers only, and close the ports over IPv4."""
    if not has_ipv6(lab):
        pytest.skip("IPv6 is disabled in the lab's namespaces")
    open_all = {(w, p): True for w in ("inside", "outside")
                for p in (MASTER_PORT, IN_RANGE, UNCOVERED)}
    assert matrix(lab, 6) == open_all  # control
    subnet = cluster_subnet(lab) if family == 4 else CLUSTER6
    req = build_request(distro="debian", firewall=firewall, profile="guide",
                        master_port=MASTER_PORT, cluster_subnet=subnet,
                        port_range=f"{EPHEMERAL[0]}-{EPHEMERAL[1]}")
    plan = firewall_only(build_plan(req, FACTS))
    run = node_runner(lab, tmp_path)
    closed = {(w, p): False for w in ("inside", "outside") for p in (MASTER_PORT, IN_RANGE)}
    try:
        out = ap.apply(plan, tmp_path, run, live=True)
        assert not out.failed, out.failed
        admitted = {("inside", MASTER_PORT): True, ("inside", IN_RANGE): True}
        other = 6 if family == 4 else 4
        assert matrix(lab, family) == {**open_all, **closed, **admitted}
        assert matrix(lab, other) == {**open_all, **closed}
    finally:
        ap.revert(tmp_path, run, live=True)
    assert matrix(lab, 6) == open_all
    rules = lab.exec(0, ["ip6tables-save"]).stdout + lab.exec(0, ["nft", "list", "ruleset"]).stdout
    assert "DDPNET" not in rules and "ddpnet" not in rules


def test_sysctl_file_loads_in_a_namespace(lab: Lab, tmp_path: Path) -> None:
    host_before = Path("/proc/sys/net/ipv4/tcp_fin_timeout").read_text()
    settings = tuple(s for s in profile_for("10g", MASTER_PORT, "", EPHEMERAL)
                     if s.scope == "netns")
    conf = tmp_path / "90-ddpnet.conf"
    conf.write_text(render_file(settings, "10g", "lab"))
    proc = lab.exec(1, ["sysctl", "-p", str(conf)])
    assert proc.returncode == 0, proc.stderr
    for s in settings:
        got = lab.exec(1, ["sysctl", "-n", s.key]).stdout.split()
        assert got == s.value.split(), s.key
    assert Path("/proc/sys/net/ipv4/tcp_fin_timeout").read_text() == host_before


def test_env_file_follows_the_net_selection(lab: Lab, tmp_path: Path) -> None:
    """Without --iface or a subnet, the interface is ddpnet.net's route toward MASTER_ADDR."""
    env = {"MASTER_ADDR": lab.master_addr, "MASTER_PORT": "29500", "WORLD_SIZE": "3",
           "RANK": "1"}
    proc = lab.exec(1, [sys.executable, "-m", "ddpnet", "tune", "--root", str(tmp_path),
                        "--distro", "debian", "--firewall", "none", "--json"], env=env)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["facts"]["iface"] == lab.nodes[1].ifname
    assert f"MASTER_ADDR {lab.master_addr}" in data["facts"]["iface_reason"]
    assert data["facts"]["sources"]["iface"] == "live host: interface selection"  # labelled
    env_file = next(f for f in data["files"] if f["path"] == "/etc/profile.d/ddpnet.sh")
    assert f'GLOO_SOCKET_IFNAME:={lab.nodes[1].ifname}' in env_file["diff"]


TRAIN = textwrap.dedent("""
    import datetime, torch, torch.distributed as dist
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    t = torch.ones(1) * (dist.get_rank() + 1)
    dist.all_reduce(t)
    print("sum", int(t.item()), flush=True)
    dist.destroy_process_group()
""")

BASELINE = [  # a host firewall that drops everything new it does not know (like firewalld)
    ["iptables", "-P", "INPUT", "DROP"],
    ["iptables", "-A", "INPUT", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED",
     "-j", "ACCEPT"],
    ["iptables", "-A", "INPUT", "-i", "lo", "-j", "ACCEPT"],
]


@pytest.mark.slow
def test_gloo_training_runs_through_the_opened_ports_only(lab: Lab, tmp_path: Path) -> None:
    """Behind a default-drop firewall, the ports tune opens (MASTER_PORT and the narrowed
    ephemeral range, loaded with the rendered sysctl) are all a real gloo job needs."""
    req = build_request(distro="debian", firewall="iptables", profile="guide",
                        master_port=MASTER_PORT + 1, cluster_subnet=cluster_subnet(lab),
                        port_range=f"{EPHEMERAL[0]}-{EPHEMERAL[1]}")
    plan = build_plan(req, FACTS)
    netns_sysctl = tmp_path / "netns.conf"
    netns_sysctl.write_text(render_file(tuple(
        s for s in profile_for("guide", req.master_port, "", EPHEMERAL) if s.scope == "netns"),
        "guide", "lab"))
    fw = firewall_only(plan)
    roots = [tmp_path / f"n{i}" for i in range(len(lab.nodes))]
    try:
        for i, root in enumerate(roots):
            root.mkdir()
            for argv in BASELINE:
                assert lab.exec(i, argv).returncode == 0
            assert lab.exec(i, ["sysctl", "-q", "-p", str(netns_sysctl)]).returncode == 0
        # the baseline really drops: even inside the subnet, an unopened port is closed
        assert not reach(lab, 1, lab.nodes[1].address, UNCOVERED)
        assert not reach(lab, 1, lab.nodes[1].address, IN_RANGE)
        for i, root in enumerate(roots):
            out = ap.apply(fw, root, node_runner_for(lab, i, root), live=True)
            assert not out.failed, out.failed
        assert reach(lab, 1, lab.nodes[1].address, IN_RANGE)
        assert not reach(lab, 2, OUTSIDE, IN_RANGE)
        env = {"GLOO_SOCKET_IFNAME": lab.nodes[0].ifname}
        results = lab.run([sys.executable, "-c", TRAIN], env=env, timeout=180,
                          master_port=req.master_port)
        for r in results:
            assert r.returncode == 0, (r.node, r.stderr[-2000:])
            assert "sum 6" in r.stdout, r.stdout
    finally:
        for i, root in enumerate(roots):
            if root.exists():
                ap.revert(root, node_runner_for(lab, i, root), live=True)
            lab.exec(i, ["iptables", "-P", "INPUT", "ACCEPT"])
            lab.exec(i, ["iptables", "-F", "INPUT"])


def node_runner_for(lab: Lab, node: int, root: Path) -> ap.Runner:
    def run(argv: Sequence[str]) -> tuple[int, str]:
        argv = [str(root / a.lstrip("/")) if a.startswith("/etc/") else a for a in argv]
        proc = lab.exec(node, argv, timeout=30)
        return proc.returncode, proc.stdout + proc.stderr

    return run
