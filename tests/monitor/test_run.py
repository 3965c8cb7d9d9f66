"""``ddpnet monitor``'s options and result: bounds checked when built, the JSON shapes,
the line per sample when piped and the ``--once`` frame."""

from __future__ import annotations

import io
import math

import pytest
from rich.console import Console

from ddpnet.errors import ConfigError
from ddpnet.monitor.rates import compute
from ddpnet.monitor.render import render, sample_line
from ddpnet.monitor.result import MonitorResult
from ddpnet.monitor.run import MonitorOptions
from tests.monitor.fixtures import counters, snap

SAMPLE = compute(snap(0.0, counters(0, 0)), snap(1.0, counters(125_000_000, 250_000_000)),
                 ["eth0"])


@pytest.mark.parametrize(("kw", "needle"), [
    ({"interval": 0.0}, "--interval"), ({"interval": math.nan}, "--interval"),
    ({"interval": 3601.0}, "--interval"), ({"duration": -1.0}, "--duration"),
    ({"duration": math.inf}, "--duration"), ({"as_json": True}, "--json needs"),
])
def test_bad_options_are_refused_when_built(kw: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        MonitorOptions(**kw)  # type: ignore[arg-type]


def test_json_with_duration_or_once_is_fine() -> None:
    assert MonitorOptions(as_json=True, duration=0.0).duration == 0.0
    assert MonitorOptions(as_json=True, once=True).once


def _result(once: bool) -> MonitorResult:
    return MonitorResult((SAMPLE,), ("eth0",), "--iface", "--iface eth0", False, once)


def test_once_json_is_the_sample_plus_selection() -> None:
    obj = _result(True).to_dict()
    assert obj["interfaces"][0]["name"] == "eth0"
    assert obj["selection"] == {"iface": {"names": ["eth0"], "source": "--iface",
                                          "reason": "--iface eth0"}, "gpu": False}
    assert set(_result(False).to_dict()) == {"selection", "samples"}


def test_line_per_sample_shows_rates_and_retransmits() -> None:
    line = sample_line(SAMPLE)
    assert line.endswith("eth0 rx 1.000 tx 2.000 Gb/s; retrans 0.0/s")


def test_once_frame_only_for_once() -> None:
    buf = io.StringIO()
    out = Console(file=buf, width=200, color_system=None)
    render(_result(False), out)
    assert buf.getvalue() == ""
    render(_result(True), out)
    text = buf.getvalue()
    assert "ddpnet monitor (--iface eth0)" in text and "Ctrl-C" not in text


def test_the_exporter_listens_on_a_monitored_interfaces_own_address() -> None:
    from ddpnet.monitor.run import Listening, metrics_address
    from ddpnet.net.interfaces import Address, Interface

    def iface(name: str, *ips: str) -> Interface:
        return Interface(name, True, tuple(Address(ip, 24, 6 if ":" in ip else 4) for ip in ips),
                         1500, None, "ether")

    found = [iface("eth0", "fe80::1", "10.0.0.5"), iface("lo", "127.0.0.1"), iface("eth1")]
    why = "selected eth0: carries the default route"
    assert metrics_address(["eth0"], found, why) == Listening(
        "10.0.0.5", f"eth0's address; {why}")  # IPv4 first, and why it is that one
    # loopback only as a last resort
    assert metrics_address(["lo", "eth0"], found).address == "10.0.0.5"
    assert metrics_address(["lo"], found).address == "127.0.0.1"
    assert metrics_address(["eth0"], found, why, "0.0.0.0") == Listening("0.0.0.0", "--listen")
    with pytest.raises(ConfigError, match="no address on eth1"):
        metrics_address(["eth1"], found)


@pytest.mark.parametrize(("listen", "port", "message"), [
    ("0.0.0.0", None, "is where --metrics-port serves"),
    ("node1", 9465, "is not an IP address"),
    ("10.0.0.5:9465", 9465, "is not an IP address"),
])
def test_listen_is_an_address_for_the_exporter(listen: str, port: int | None,
                                               message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        MonitorOptions(listen=listen, metrics_port=port)
    assert MonitorOptions(listen="::1", metrics_port=9465).listen == "::1"
