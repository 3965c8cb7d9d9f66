"""A real lab with a second network (``--second-net``): the nodes reach each other on it,
a ``second_first`` node lists the second NIC first (the order NCCL walks), and ``rate`` shapes
only the first NIC, so a slow management network sits beside a fast one."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from ddpnet.lab import Lab
from ddpnet.lab.system import run
from tests.lab_util import fresh_lab, requires_netns

pytestmark = [requires_netns, pytest.mark.root]


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with fresh_lab("sn", nodes=2, rate="100mbit", second_net="198.18.2.0/24",
                   second_first=(1,)) as lab:
        yield lab


def test_nodes_reach_each_other_on_the_second_network(lab: Lab) -> None:
    for src, dst in ((0, 1), (1, 0)):
        address = lab.nodes[dst].second_address
        ping = lab.exec(src, ["ping", "-c", "1", "-W", "2", address], timeout=10)
        assert ping.returncode == 0, ping.stdout + ping.stderr
    # the hosts file stays on the first network
    resolved = lab.exec(0, ["getent", "hosts", lab.nodes[1].hostname]).stdout.split()
    assert resolved[0] == lab.nodes[1].address
    assert Lab.attach(lab.name).spec == lab.spec  # the state file round-trips the spec


def _links(lab: Lab, node: int) -> list[str]:
    out = lab.exec(node, ["ip", "-o", "link"]).stdout
    return [m.group(1) for m in re.finditer(r"^\d+: ([^:@]+)", out, re.MULTILINE)]


def test_second_first_node_lists_the_second_nic_first(lab: Lab) -> None:
    assert _links(lab, 0) == ["lo", "eth0", "eth1"]
    assert _links(lab, 1) == ["lo", "eth1", "eth0"]


def test_rate_shapes_only_the_first_nic(lab: Lab) -> None:
    for node in lab.nodes:
        shown = {dev: lab.exec(node.index, ["tc", "qdisc", "show", "dev", dev]).stdout
                 for dev in ("eth0", "eth1")}
        assert "tbf" in shown["eth0"] and "rate 100Mbit" in shown["eth0"], shown
        assert "tbf" not in shown["eth1"], shown
        ports = {port: run(["tc", "-n", lab.plan.switch, "qdisc", "show", "dev", port]).stdout
                 for port in (node.port, node.second_port)}
        assert "tbf" in ports[node.port] and "tbf" not in ports[node.second_port], ports
