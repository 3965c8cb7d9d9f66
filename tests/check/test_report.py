"""Renderers: JSON schema, text, and the HTML report opened in headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from ddpnet.check.causes import Cause
from ddpnet.check.render_html import render_html
from ddpnet.check.render_text import render
from ddpnet.check.report import CheckReport

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _failing_report() -> CheckReport:
    labels = [f"n{i}" for i in range(4)]
    return CheckReport(
        world_size=4, master="198.18.0.1:29500",
        causes=(
            Cause("slow-node", "rank 3 on n3 is slow sending", "ethtool eth0", ("n3",), (3,),
                  stage="bandwidth"),
            Cause("peer-port-blocked", "no rank can connect to rank 2 <b>", "open ports",
                  ("n2 (198.18.0.3)",), (2,), stage="reachability"),
            Cause("clock-skew", "rank 1 +2.00 s", "timedatectl set-ntp true", ("n1",), (1,),
                  severity="warn", stage="facts"),
        ),
        nodes=tuple({"rank": i, "host": labels[i], "address": f"198.18.0.{i + 1}",
                     "interface": "eth0", "mtu": 1500, "clock_offset_s": 0.001 * i,
                     "interface_why": {"source": "auto", "reason": "routes to MASTER_ADDR"}}
                    for i in range(4)),
        reachability=tuple(tuple("self" if i == j else ("filtered" if j == 2 else "ok")
                                 for j in range(4)) for i in range(4)),
        bandwidth_gbps=tuple(tuple(None if i == j else (0.09 if i == 3 else 0.94)
                                   for j in range(4)) for i in range(4)),
        # the mesh's round trips, ms: node 1 behind a 40 ms delay
        rtt_ms=tuple(tuple(None if i == j else (40.31 if 1 in (i, j) else 0.05)
                           for j in range(4)) for i in range(4)),
        allreduce={"ok": True, "ranks_ok": 4, "backend": "gloo"},
        timings={"rendezvous": 0.5, "total": 4.2},
        stages={"rendezvous": "pass", "reachability": "fail"},
    )


def test_json_schema_and_root_cause_first() -> None:
    data = json.loads(json.dumps(_failing_report().to_dict()))
    assert set(data) >= {"verdict", "causes", "nodes", "reachability", "bandwidth_gbps",
                         "rtt_ms", "allreduce", "timings"}
    assert data["rtt_ms"][0][1] == 40.31 and data["rtt_ms"][2][2] is None
    assert data["verdict"] == "fail"
    # the earliest failing layer first (reachability before bandwidth), warnings last
    assert [c["id"] for c in data["causes"]] == ["peer-port-blocked", "slow-node",
                                                 "clock-skew"]
    assert data["root_cause"]["id"] == "peer-port-blocked"
    for c in data["causes"]:
        assert set(c) >= {"id", "hosts", "ranks", "detail", "fix"}


def test_warnings_only_is_a_pass() -> None:
    report = CheckReport(world_size=2, master="x:1", causes=(
        Cause("clock-skew", "d", "f", severity="warn"),))
    assert report.verdict == "pass" and report.root is not None


def test_text_report_leads_with_the_root_cause() -> None:
    from rich.console import Console

    console = Console(record=True, width=140)
    render(_failing_report(), console)
    text = console.export_text()
    assert text.index("FAIL") < text.index("ROOT CAUSE: peer-port-blocked")
    assert text.index("peer-port-blocked") < text.index("slow-node")
    assert "filtered" in text and "0.09" in text
    # each link's round trip beside its bandwidth
    assert "bandwidth Gb/s · round trip ms" in text
    assert "0.94 · 40.3" in text and "0.94 · 0.05" in text and "0.09 · 0.05" in text
    assert "eth0 (auto)" in text  # the interface and who chose it


def test_html_is_self_contained_and_escaped() -> None:
    page = render_html(_failing_report())
    assert "<script" not in page and "<link" not in page and "url(" not in page
    assert re.findall(r"https?://[^'\"]+", page) == ["http://www.w3.org/2000/svg"]
    assert "rank 2 &lt;b&gt;" in page and "rank 2 <b>" not in page
    assert "id='verdict' class='fail'" in page
    # which interface each node uses and why
    assert "why this interface" in page and "auto: routes to MASTER_ADDR" in page
    assert "id='rtt'" in page and ">40.3</td>" in page and ">0.05</td>" in page


def test_a_report_without_the_bandwidth_matrix_shows_the_round_trips_alone() -> None:
    from rich.console import Console

    report = CheckReport(world_size=2, master="x:1", causes=(),
                         rtt_ms=((None, 0.04), (0.06, None)))
    console = Console(record=True, width=140)
    render(report, console)
    text = console.export_text()
    title = " ".join(text.split())  # the title wraps to the table's width
    assert "round trip ms (row connects to column)" in title and "bandwidth" not in text
    assert "0.04" in text and "0.06" in text


def _chromium(url: str, out: Path) -> tuple[str, list[str]]:
    """The rendered DOM and the console messages of a page in headless Chromium."""
    assert CHROMIUM is not None
    with tempfile.TemporaryDirectory(prefix="ck-chromium-") as profile:
        proc = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
             f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
             "--host-resolver-rules=MAP * ~NOTFOUND", "--dump-dom", url],
            capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return proc.stdout, console


@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt-get install chromium)")
def test_html_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    # the harness sees console errors (so an empty list below means something)
    bad = tmp_path / "bad.html"
    bad.write_text("<p>x</p><script>console.error('ck-boom')</script>")
    _, console = _chromium(bad.as_uri(), tmp_path)
    assert any("ck-boom" in line for line in console), console

    page = tmp_path / "report.html"
    page.write_text(render_html(_failing_report()))
    dom, console = _chromium(page.as_uri(), tmp_path)
    assert console == []
    assert re.search(r'id="verdict" class="fail">FAIL<', dom)
    assert 'id="reachability"' in dom and 'id="bandwidth"' in dom
    assert 'id="bandwidth-chart"' in dom and 'id="nodes"' in dom and 'id="rtt"' in dom
    assert dom.count(">filtered</td>") == 3 and ">0.09</td>" in dom
    assert "Root cause" in dom and "peer-port-blocked" in dom


def test_large_clusters_get_summaries_not_n_by_n_tables() -> None:
    from rich.console import Console

    n = 200
    mesh = tuple(tuple("self" if i == j else ("refused" if (i, j) == (5, 7) else "ok")
                       for j in range(n)) for i in range(n))
    report = CheckReport(world_size=n, master="m:1", causes=(), reachability=mesh)
    page = render_html(report)
    assert "<table class='hm' id='reachability'>" not in page
    assert f"{n * (n - 1) - 1} of {n * (n - 1)} links ok" in page and "5 &#8594; 7" in page
    console = Console(record=True, width=120)
    render(report, console)
    assert f"{n * (n - 1) - 1} of {n * (n - 1)} links ok" in console.export_text()


def test_bench_summary_line() -> None:
    from rich.console import Console

    report = CheckReport(world_size=2, master="m:1", causes=(), bench={
        "rows": [{"bytes": 1 << 20, "busbw_gbps": 0.5}, {"bytes": 64 << 20, "busbw_gbps": 0.9}],
        "measured_link_gbps": 0.94})
    console = Console(record=True, width=120)
    render(report, console)
    assert "busbw up to 0.90 Gb/s at 64 MiB (slowest link 0.94 Gb/s)" in console.export_text()


def test_an_interface_variable_that_cannot_work_is_the_root_not_the_failed_group() -> None:
    # GLOO_SOCKET_IFNAME=eth1 on a node whose eth1 has only IPv6: the group then fails too
    from ddpnet.check.causes import Cause, sort_causes

    group = Cause("process-group-failed", "gloo timed out", "see the root cause")
    for cause_id in ("ifname-syntax", "ifname-missing", "ifname-down", "ifname-no-address"):
        ifname = Cause(cause_id, "GLOO_SOCKET_IFNAME=eth1: eth1 has no IPv4 address", "pin")
        mismatch = Cause("interface-mismatch", "not one network", "pin")
        assert sort_causes([group, mismatch, ifname])[0].id == cause_id


def test_the_networks_compared_are_in_the_json_and_the_html() -> None:
    rows = ({"subnet": "10.0.0.0/24", "interfaces": "eth0", "nominal": "1000 Mb/s",
             "job": True, "gbps": 0.94},
            {"subnet": "10.1.0.0/24", "interfaces": "ib0", "nominal": "100000 Mb/s",
             "job": False, "gbps": 31.5})
    report = CheckReport(world_size=2, master="x:1", causes=(), networks=rows)
    assert report.to_dict()["networks"] == list(rows)
    page = render_html(report)
    assert "<table id='networks'>" in page and "10.1.0.0/24" in page and "31.5" in page
    assert "id='networks'" not in render_html(CheckReport(world_size=2, master="x:1",
                                                          causes=()))


def _local_report() -> CheckReport:
    """Two ranks of one host (--local) and one on another: the HTML of ``check --local``."""
    addresses = ("198.18.0.1", "198.18.0.1", "198.18.0.2")
    return CheckReport(
        world_size=3, master="127.0.0.1:29500", causes=(),
        nodes=tuple({"rank": i, "host": "vm", "address": addresses[i], "interface": "lo",
                     "clock_offset_s": 0.002,
                     "interface_why": {"source": "--local", "reason": "set by --local"}}
                    for i in range(3)),
        bandwidth_gbps=((None, 2.0, 9.0), (21.0, None, 9.5), (9.2, 9.1, None)))


def test_html_shows_same_host_links_neutral_not_slow() -> None:
    page = render_html(_local_report())
    same = "style='background:#eaeef2;color:#1b1f24' title='0->1: 2.000 Gb/s, same host"
    assert same in page and "1->0: 21.000 Gb/s, same host (loopback): not judged" in page
    # the links that cross a NIC are judged against their own median, not loopback's
    assert "title='0->2: 9.000 Gb/s'" in page and "rgb(45,164,78)" in page
    assert "grey: ranks of one host" in page


def test_html_labels_and_sources_read_as_words() -> None:
    page = render_html(_local_report())
    assert "<th>clock offset (s)</th>" in page and "clock_offset_s</th>" not in page
    assert "<td class='l'>set by --local</td>" in page
    assert "set by GLOO_SOCKET_IFNAME" not in page


def _evidenced() -> CheckReport:
    return CheckReport(world_size=2, master="x:1", causes=(
        Cause("mtu-mismatch", "mtu differs", "ip link set dev eth0 mtu 1500", ("n1",), (1,),
              stage="facts", evidence=("rank 1 on n1: eth0 mtu 9000 <x>",),
              ruled_out=("a firewall: small packets pass",), confidence="medium",
              see_for_yourself="ip -br link"),
        Cause("clock-skew", "rank 1 +2.00 s", "timedatectl set-ntp true", severity="warn",
              evidence=("rank 1 on n1: clock +2.00 s",), see_for_yourself="timedatectl")))


def test_every_cause_shows_its_evidence_in_json_text_and_html() -> None:
    from rich.console import Console

    data = _evidenced().to_dict()
    assert data["root_cause"]["evidence"] == ["rank 1 on n1: eth0 mtu 9000 <x>"]
    assert data["root_cause"]["ruled_out"] == ["a firewall: small packets pass"]
    assert data["root_cause"]["confidence"] == "medium"
    assert data["root_cause"]["see_for_yourself"] == "ip -br link"
    console = Console(record=True, width=140)
    render(_evidenced(), console)
    text = console.export_text()
    assert "evidence: rank 1 on n1: eth0 mtu 9000 <x>" in text
    assert "ruled out: a firewall: small packets pass" in text
    assert "confidence: medium" in text and "see it yourself: ip -br link" in text
    assert "see it yourself: timedatectl" in text  # the other findings too
    page = render_html(_evidenced())
    assert "eth0 mtu 9000 &lt;x&gt;" in page and "<code>ip -br link</code>" in page
    assert "ruled out:</span> a firewall" in page
