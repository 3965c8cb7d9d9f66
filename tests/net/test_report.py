"""``ddpnet env``'s report: the JSON object (config plus ``network``) and both tables."""

from __future__ import annotations

import io

from rich.console import Console

from ddpnet.net.report import EnvReport, render
from ddpnet.net.routes import Route
from ddpnet.net.select import select
from tests.net.fixtures import LO, cfg, iface

ETH0 = iface("eth0", "198.18.0.3/24")
ROUTE = Route("eth0", "198.18.0.3", None, dst="198.18.0.1")


def _report(environ: dict[str, str] | None = None) -> EnvReport:
    c = cfg()
    return EnvReport(c, select(c, (ETH0, LO), ROUTE, environ or {}))


def test_json_is_the_config_plus_network() -> None:
    report = _report()
    obj = report.to_dict()
    assert obj["rank"] == 1 and obj["master_addr"] == "198.18.0.1"
    assert obj["network"]["interface"] == "eth0"
    assert report.exit_code == 0


def test_human_shows_config_then_network_and_problems() -> None:
    buf = io.StringIO()
    render(_report({"NCCL_SOCKET_IFNAME": "nt-nope"}), Console(file=buf, width=200,
                                                               color_system=None))
    text = buf.getvalue()
    assert text.index("ddpnet env") < text.index("network: eth0 (198.18.0.3)")
    assert "ifname-missing" in text and "problem: NCCL_SOCKET_IFNAME" in text
    assert "ddpnet.init() sets: GLOO_SOCKET_IFNAME=eth0" in text
