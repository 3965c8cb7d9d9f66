"""A real router in the lab: nodes behind NAT reach the outside under the router's address,
the outside cannot reach them (no route; with one, the NAT drops it), a port forward reaches
an inner node with the caller's own address, a routed lab forwards both ways untouched, and
``down`` removes the router too."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

from ddpnet.lab import Lab
from ddpnet.lab.system import existing_namespaces
from tests.lab_util import fresh_lab, requires_netns

pytestmark = [requires_netns, pytest.mark.root]

#: accepts one TCP connection on argv[1]:argv[2] and prints the caller's address
SERVER = textwrap.dedent("""
    import socket, sys
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(4); s.settimeout(10)
    print("listening", flush=True)
    c, peer = s.accept(); print(peer[0], flush=True)
""")
CONNECT = textwrap.dedent("""
    import socket, sys
    try:
        socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1).close()
        print("ok")
    except OSError as exc:
        print(type(exc).__name__, exc.errno)
""")


@pytest.fixture(scope="module")
def nat() -> Iterator[Lab]:
    with fresh_lab("rtn", nodes=3, behind=(1,), forwards=((5601, 1),)) as lab:
        yield lab


def _seen(lab: Lab, server: int, bind: str, client: int, address: str, port: int) -> str:
    """Who ``server`` sees when ``client`` connects to ``address:port``; the client's error
    otherwise."""
    proc = lab.popen(server, [sys.executable, "-c", SERVER, bind, str(port)],
                     stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "listening"
        said = _connect(lab, client, address, port)
        if said != "ok":
            return said
        return proc.stdout.readline().strip()
    finally:
        proc.kill()
        proc.wait(5)


def _connect(lab: Lab, node: int, address: str, port: int) -> str:
    return lab.exec(node, [sys.executable, "-c", CONNECT, address, str(port)],
                    timeout=20).stdout.strip()


def test_inner_node_reaches_out_under_the_routers_address(nat: Lab) -> None:
    rt = nat.plan.router
    assert rt is not None and nat.nodes[1].address == "198.19.1.3"
    assert _seen(nat, 0, nat.master_addr, 1, nat.master_addr, 5602) == rt.outer


def test_outside_cannot_reach_the_inner_address(nat: Lab) -> None:
    inner = nat.nodes[1].address
    assert _connect(nat, 0, inner, 5603) == "OSError 101"  # ENETUNREACH: no route in
    # even with a route through the router, the NAT forwards only replies inwards
    nat.exec(2, ["ip", "route", "add", "198.19.1.0/24", "via", nat.plan.router.outer])  # type: ignore[union-attr]
    assert _connect(nat, 2, inner, 5603) == "TimeoutError None"


def test_port_forward_reaches_the_inner_node_with_the_callers_address(nat: Lab) -> None:
    rt = nat.plan.router
    assert rt is not None
    assert _seen(nat, 1, "0.0.0.0", 0, rt.outer, 5601) == nat.master_addr


def test_routed_lab_forwards_both_ways_untouched_and_down_removes_the_router() -> None:
    with fresh_lab("rtr", nodes=3, behind=(2,), router="routed") as lab:
        inner, outer = lab.nodes[2].address, lab.master_addr
        assert _seen(lab, 0, outer, 2, outer, 5604) == inner
        assert _seen(lab, 2, inner, 0, inner, 5605) == outer
        router = lab.plan.router.namespace  # type: ignore[union-attr]
        assert router in existing_namespaces()
    assert router not in existing_namespaces()
