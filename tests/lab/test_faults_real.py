"""Every fault has its effect on a real lab, and ``clear`` undoes it."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest

from ddpnet.lab import Lab
from tests.lab_util import fresh_lab, requires_netns

pytestmark = [requires_netns, pytest.mark.root]

PORTS = (29500, 29400, 29512, 40123)

#: accepts on every port in argv, forever
SERVER = textwrap.dedent("""
    import selectors, socket, sys
    sel = selectors.DefaultSelector()
    for p in sys.argv[1:]:
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", int(p))); s.listen(64); sel.register(s, selectors.EVENT_READ)
    print("listening", flush=True)
    while True:
        for key, _ in sel.select():
            c, _ = key.fileobj.accept(); c.close()
""")

#: prints ok / timeout / refused / unreachable for host:port
CONNECT = textwrap.dedent("""
    import socket, sys
    try:
        addr = (sys.argv[1], int(sys.argv[2]))
        socket.create_connection(addr, timeout=float(sys.argv[3])).close()
        print("ok")
    except TimeoutError: print("timeout")
    except ConnectionRefusedError: print("refused")
    except OSError as e: print("unreachable", e)
""")


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with fresh_lab("lb", nodes=3) as lab:
        server = lab.popen(0, [sys.executable, "-c", SERVER, *map(str, PORTS)],
                           stdout=subprocess.PIPE, text=True)
        assert server.stdout is not None and server.stdout.readline().strip() == "listening"
        yield lab


@pytest.fixture(autouse=True)
def _clear(lab: Lab) -> Iterator[None]:
    yield
    lab.clear()


def connect(lab: Lab, node: int, port: int, timeout: float = 1.0) -> str:
    cp = lab.exec(node, [sys.executable, "-c", CONNECT, lab.master_addr, str(port),
                         str(timeout)], timeout=30)
    return cp.stdout.strip().split(" ")[0]


def ping(lab: Lab, node: int, *args: str, target: str | None = None) -> int:
    return lab.exec(node, ["ping", "-c1", "-W1", *args, target or lab.master_addr],
                    timeout=30).returncode


def test_block_port_drops_then_clear_reopens(lab: Lab) -> None:
    assert connect(lab, 1, 29512) == "ok"
    lab.fault("block-port", 0, port=29512)
    assert connect(lab, 1, 29512) == "timeout"
    assert connect(lab, 1, 29500) == "ok"           # only that port
    assert lab.faults(0) == [{"kind": "block-port", "port": 29512, "reject": False}]
    lab.clear(0)
    assert connect(lab, 1, 29512) == "ok"
    assert lab.faults(0) == []


def test_block_port_reject_is_refused(lab: Lab) -> None:
    lab.fault("block-port", 0, port=29512, reject=True)
    assert connect(lab, 2, 29512, timeout=5) == "refused"


def test_block_ephemeral_keeps_master_and_rendezvous_ports_only(lab: Lab) -> None:
    lab.fault("block-ephemeral", 0)
    assert [connect(lab, 1, p) for p in PORTS] == ["ok", "ok", "timeout", "timeout"]
    assert ping(lab, 1) == 0                         # ICMP still passes
    lab.clear()
    assert [connect(lab, 1, p) for p in PORTS] == ["ok"] * 4


def test_link_down_unreachable_then_back_by_clear_and_by_timer(lab: Lab) -> None:
    lab.fault("link-down", 1)
    assert ping(lab, 1) != 0 and ping(lab, 0, target=lab.nodes[1].address) != 0
    lab.clear(1)
    assert ping(lab, 1) == 0
    lab.fault("link-down", 1, for_s=3)
    assert ping(lab, 1) != 0
    deadline = time.monotonic() + 10
    while ping(lab, 1) != 0:
        assert time.monotonic() < deadline, "link did not come back after --for"
        time.sleep(0.2)
    assert lab.faults(1) == []                      # an expired link-down is no longer listed


def test_hostname_loopback_resolves_own_name_to_127_0_1_1(lab: Lab) -> None:
    lookup = ["sh", "-c", 'getent hosts "$(hostname)"']
    assert lab.exec(2, lookup).stdout.split()[0] == lab.nodes[2].address
    lab.fault("hostname-loopback", 2)
    assert lab.exec(2, lookup).stdout.split()[0] == "127.0.1.1"
    # other nodes still resolve it to its lab address
    assert lab.exec(0, ["getent", "hosts", lab.nodes[2].hostname]).stdout.split()[0] == \
        lab.nodes[2].address
    lab.clear(2)
    assert lab.exec(2, lookup).stdout.split()[0] == lab.nodes[2].address


def test_extra_iface_exists_sorts_first_and_does_not_route_to_master(lab: Lab) -> None:
    lab.fault("extra-iface", 1)
    links = lab.exec(1, ["ls", "/sys/class/net"]).stdout.split()
    assert sorted(links) == ["docker0", "eth0", "lo"] and sorted(links)[0] == "docker0"
    addr = lab.exec(1, ["ip", "-o", "-4", "addr", "show", "docker0"]).stdout
    assert re.search(r"inet 198\.19\.254\.\d+/24", addr)
    route = lab.exec(1, ["ip", "route", "get", lab.master_addr]).stdout
    assert " dev eth0 " in route
    assert ping(lab, 1, "-I", "docker0") != 0
    lab.clear(1)
    assert "docker0" not in lab.exec(1, ["ls", "/sys/class/net"]).stdout


def test_an_extra_iface_of_another_name_is_removed_by_clear(lab: Lab) -> None:
    lab.fault("extra-iface", 1, iface="ib0")
    lab.clear(1)  # its switch end went too: the next extra-iface can be made
    assert "ib0" not in lab.exec(1, ["ls", "/sys/class/net"]).stdout
    lab.fault("extra-iface", 1, iface="docker0")
    assert "docker0" in lab.exec(1, ["ls", "/sys/class/net"]).stdout


def test_port_mtu_and_vip_then_clear(lab: Lab) -> None:
    lab.fault("mtu", 1, mtu=9000)
    lab.fault("port-mtu", 1, mtu=9000)
    assert ping(lab, 1, "-M", "do", "-s", "4000") != 0  # node 0's port is still 1500
    lab.fault("mtu", 0, mtu=9000)
    lab.fault("port-mtu", 0, mtu=9000)
    assert ping(lab, 1, "-M", "do", "-s", "4000") == 0  # jumbo end to end
    lab.fault("vip", 1, address="198.18.0.250")
    assert lab.exec(1, ["ping", "-c1", "-W2", "198.18.0.250"]).returncode == 0  # DNAT'd
    lab.clear()
    assert "mtu 1500" in lab.exec(1, ["ip", "link", "show", "eth0"]).stdout
    assert lab.exec(1, ["ping", "-c1", "-W1", "198.18.0.250"]).returncode != 0


def test_mtu_mismatch_drops_big_frames(lab: Lab) -> None:
    lab.fault("mtu", 1, mtu=9000)
    assert "mtu 9000" in lab.exec(1, ["ip", "link", "show", "eth0"]).stdout
    assert ping(lab, 1, "-s", "1000") == 0
    assert ping(lab, 1, "-M", "do", "-s", "4000") != 0   # the switch port is still 1500
    lab.clear(1)
    assert "mtu 1500" in lab.exec(1, ["ip", "link", "show", "eth0"]).stdout
    assert ping(lab, 1, "-M", "do", "-s", "1400") == 0


def _loss(lab: Lab, node: int) -> float:
    out = lab.exec(node, ["ping", "-q", "-c", "100", "-i", "0.005", "-W", "1", lab.master_addr],
                   timeout=60).stdout
    m = re.search(r"([\d.]+)% packet loss", out)
    assert m, out
    return float(m.group(1))


def test_loss_drops_about_that_share_then_clear(lab: Lab) -> None:
    lab.fault("loss", 1, percent=50)
    assert 20 <= _loss(lab, 1) <= 80    # binomial(100, 0.5): outside 20-80 has p < 1e-9
    lab.clear(1)
    assert _loss(lab, 1) == 0


def test_rate_fault_and_unknown_kind(lab: Lab) -> None:
    lab.fault("rate", 2, rate="50mbit")
    qdisc = lab.exec(2, ["tc", "qdisc", "show", "dev", "eth0"]).stdout
    assert "tbf" in qdisc and "50Mbit" in qdisc
    lab.clear(2)
    assert "tbf" not in lab.exec(2, ["tc", "qdisc", "show", "dev", "eth0"]).stdout
    from ddpnet.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown fault kind"):
        lab.fault("meteor", 1)
    with pytest.raises(ConfigError, match="needs a port"):
        lab.fault("block-port", 1)


#: median TCP connect time in ms from this node to host:port (a SYN/SYN-ACK round trip)
CONNECT_MS = textwrap.dedent("""
    import socket, statistics, sys, time
    times = []
    for _ in range(7):
        t = time.perf_counter()
        socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()
        times.append((time.perf_counter() - t) * 1000)
    print(statistics.median(times))
""")


def _connect_ms(lab: Lab, node: int) -> float:
    cp = lab.exec(node, [sys.executable, "-c", CONNECT_MS, lab.master_addr, "29512"], timeout=60)
    assert cp.returncode == 0, cp.stderr
    return float(cp.stdout)


def test_delay_adds_latency_then_clear(lab: Lab) -> None:
    # (generous bounds: a shared 2-core machine under load adds milliseconds of scheduling)
    assert _connect_ms(lab, 1) < 40
    lab.fault("delay", 1, ms=80)
    assert _connect_ms(lab, 1) >= 80      # one direction of node 1's link holds 80 ms
    assert _connect_ms(lab, 2) < 40       # other nodes unaffected
    assert lab.status()["nodes"][1]["shaping"]["delay_ms"] == 80
    lab.clear(1)
    assert _connect_ms(lab, 1) < 40


def test_delay_with_jitter_varies_around_the_delay(lab: Lab) -> None:
    """``delay --ms 80 --jitter 40``: each connect's round trip holds 40-120 ms (plus the
    host's scheduling), its median near 80; the soak's jittery links (issue 56)."""
    lab.fault("delay", 1, ms=80, jitter_ms=40)
    try:
        assert 35 <= _connect_ms(lab, 1) < 160
        assert lab.status()["nodes"][1]["shaping"]["jitter_ms"] == 40
    finally:
        lab.clear(1)
    assert _connect_ms(lab, 1) < 40
