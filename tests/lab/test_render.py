"""``ddpnet lab``'s human output: the nodes table, one line per change, prefixed run lines."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from ddpnet.lab.render import PrefixedLines, nodes_table, render_fault, render_up, shaping_text
from ddpnet.lab.result import FaultResult, UpResult
from ddpnet.lab.topology import LabNode

STATUS: dict[str, Any] = {
    "name": "l", "subnet": "198.18.0.0/24",
    "nodes": [{"namespace": "l-n0", "hostname": "l-n0", "address": "198.18.0.1",
               "extra_addresses": ["198.18.1.1/24"], "ifname": "eth0",
               "shaping": {"rate": "1gbit", "delay_ms": 0.5, "loss_pct": 0},
               "faults": [{"kind": "hostname-loopback"}]}],
}


def _text(fn: Any, *args: Any) -> str:
    buf = io.StringIO()
    fn(*args, Console(file=buf, width=200, color_system=None, soft_wrap=True))
    return buf.getvalue()


def test_shaping_shows_only_what_is_set() -> None:
    assert shaping_text({"rate": "1gbit", "delay_ms": 0.5, "loss_pct": 0}) == \
        "rate 1gbit, delay 0.5ms"
    assert shaping_text({"rate": None, "delay_ms": 0, "loss_pct": 0}) == "-"


def test_table_and_up_line() -> None:
    table = _text(nodes_table, STATUS)
    assert "lab l (198.18.0.0/24)" in table and "198.18.0.1 198.18.1.1/24" in table
    up = _text(render_up, UpResult(STATUS, False, 0.25, "slurm: sinfo"))
    assert "lab l: already up (1 nodes, 0.25 s); run: ddpnet lab run --name l -- CMD" in up
    assert up.rstrip().endswith("slurm: sinfo")


def test_the_router_is_shown_under_the_table() -> None:
    router = {"namespace": "l-rt", "mode": "nat", "outer": "198.18.0.254",
              "inner": "198.19.1.1", "subnet": "198.19.1.0/24",
              "forwards": [{"port": 29500, "to": "198.19.1.2"}]}
    text = _text(nodes_table, {**STATUS, "router": router})
    assert "router l-rt (nat): 198.18.0.254 outside, 198.19.1.1 on 198.19.1.0/24; port " \
        "forwards 29500 -> 198.19.1.2" in text
    assert "router" not in _text(nodes_table, {**STATUS, "router": None})


def test_fault_lines() -> None:
    assert _text(render_fault, FaultResult("l", None, None)) == \
        "lab l: cleared faults on all nodes\n"
    assert _text(render_fault, FaultResult("l", 1, "l-n1")) == "lab l: cleared faults on l-n1\n"
    shown = _text(render_fault, FaultResult("l", 1, "l-n1", {"kind": "hostname-loopback"}))
    assert shown.startswith("lab l: l-n1: ")


def test_run_lines_are_prefixed_and_padded(capsys: pytest.CaptureFixture[str]) -> None:
    sink = PrefixedLines(6)
    node = LabNode(0, "l-n0", "l-n0", "l-n0", "eth0", "198.18.0.1")
    sink(node, "stdout", "hello")
    sink(node, "stderr", "exit 7")
    out = capsys.readouterr()
    assert out.out == "l-n0   | hello\n" and out.err == "l-n0   | exit 7\n"


def test_a_second_network_gets_its_own_column() -> None:
    node = {**STATUS["nodes"][0], "second_ifname": "eth1", "second_address": "198.18.2.1",
            "second_shaping": {"rate": "10gbit", "delay_ms": None, "loss_pct": None}}
    text = _text(nodes_table, {**STATUS, "second_net": "198.18.2.0/24", "nodes": [node]})
    assert "lab l (198.18.0.0/24, second 198.18.2.0/24)" in text
    assert "eth1 198.18.2.1 (rate 10gbit)" in text
    assert "second" not in _text(nodes_table, STATUS)
