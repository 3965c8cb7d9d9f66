"""The one firewall reader: parsers of each tool's output (nft JSON, iptables-save and
iptables -S, ufw.conf, /etc/default/ufw), the state composed from them (doctor's "filters
input now" and tune's "switched on, ddpnet's own rules not counted"), the edge over a fixture
tree with canned outputs, and the real tools in a scratch network namespace."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ddpnet.net import firewall as fw
from ddpnet.subproc import CommandOutput, run_command
from tests.doctor.helpers import fixture
from tests.lab_util import requires_netns, unique_name


def ok(text: str, rc: int = 0) -> CommandOutput:
    return CommandOutput(rc, text, "")


def nft_json(*tables: tuple[str, str, str | None, list[str]]) -> str:
    """(family, table, hook, rule verdicts) per table: one chain ``input`` each."""
    items: list[dict[str, Any]] = [{"metainfo": {"version": "1.0.6"}}]
    for family, table, hook, verdicts in tables:
        items.append({"table": {"family": family, "name": table}})
        chain: dict[str, Any] = {"family": family, "table": table, "name": "input"}
        if hook:
            chain.update(type="filter", hook=hook, prio=0, policy="accept")
        items.append({"chain": chain})
        for v in verdicts:
            items.append({"rule": {"family": family, "table": table, "chain": "input",
                                   "expr": [{v: None}]}})
    return json.dumps({"nftables": items})


OURS = ("inet", "ddpnet", "input", ["drop"])
THEIRS_EMPTY = ("inet", "filter", "input", [])
IPT_NFT = ("ip", "filter", "input", ["accept"])

IPT_S_OURS = "-P INPUT ACCEPT\n-P FORWARD ACCEPT\n-P OUTPUT ACCEPT\n-N DDPNET\n" \
             "-A INPUT -j DDPNET\n-A DDPNET -s 10.0.0.0/24 -p tcp -j ACCEPT\n"
IPT_SAVE_THEIRS = "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p tcp --dport 22 -j ACCEPT\nCOMMIT\n"

ZONES = "public (active)\n  target: default\n  interfaces: eth0\n  services: ssh\n"


# --------------------------------------------------------------------------- parsers

def test_nft_skips_iptables_nft_chain_when_iptables_save_read() -> None:
    # moved from tests/doctor/test_firewall_rules.py with the parser
    text = fixture("firewall/nft_of_iptables_nft.json")
    assert fw.has_nft_rules(fw.parse_nft(text))
    assert not fw.has_nft_rules(fw.parse_nft(text), skip_iptables=True)


def test_iptables_policy_and_empty() -> None:
    # moved from tests/doctor/test_firewall_rules.py with the parser
    assert fw.has_ipt_rules(fw.parse_iptables_save(fixture("firewall/ipt_policy_drop.txt")))
    assert not fw.has_ipt_rules(fw.parse_iptables_save(fixture("firewall/ipt_empty.txt")))


def test_iptables_dash_s_output_parses_like_iptables_save() -> None:
    rules = fw.parse_iptables_save(IPT_S_OURS)
    assert rules is not None
    assert rules.policies == {"INPUT": "ACCEPT", "FORWARD": "ACCEPT", "OUTPUT": "ACCEPT"}
    assert rules.rules["INPUT"] == (("-j", "DDPNET"),)
    assert rules.rules["DDPNET"] == (("-s", "10.0.0.0/24", "-p", "tcp", "-j", "ACCEPT"),)
    drop = fw.parse_iptables_save("-P INPUT DROP\n")
    assert drop is not None and fw.has_ipt_rules(drop)
    assert fw.parse_iptables_save("") is None
    assert fw.parse_iptables_save("*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n") is None


def test_nft_broken_dump_raises_value_or_key_error() -> None:
    with pytest.raises(ValueError):
        fw.parse_nft("not json")
    with pytest.raises(KeyError):
        fw.parse_nft('{"nftables": [{"chain": {"family": "inet"}}]}')


def test_tune_view_of_nft_ignores_our_table_and_iptables_nft() -> None:
    # the assertions of tune's former _nft_filters_input, over the JSON dump
    assert not fw.nft_hooks_input_besides_ours(fw.parse_nft(nft_json(OURS)))
    assert fw.nft_hooks_input_besides_ours(fw.parse_nft(nft_json(OURS, THEIRS_EMPTY)))
    assert not fw.nft_hooks_input_besides_ours(fw.parse_nft(nft_json(IPT_NFT)))
    assert not fw.nft_hooks_input_besides_ours(
        fw.parse_nft(nft_json(("inet", "x", None, ["drop"]))))  # a regular chain: no hook


def test_tune_view_of_iptables_ignores_our_jump() -> None:
    assert not fw.ipt_filters_input_besides_ours(fw.parse_iptables_save(IPT_S_OURS))
    assert fw.ipt_filters_input_besides_ours(fw.parse_iptables_save(IPT_SAVE_THEIRS))
    assert fw.ipt_filters_input_besides_ours(fw.parse_iptables_save("-P INPUT DROP\n"))
    assert not fw.ipt_filters_input_besides_ours(None)


@pytest.mark.parametrize(("conf", "on"), [
    ("ENABLED=yes\n", True), ("# comment\nENABLED = YES\n", True), ("ENABLED=no\n", False),
    ("#ENABLED=yes\n", False), ("", False), (None, False),
])
def test_ufw_conf(conf: str | None, on: bool) -> None:
    assert fw.ufw_enabled(conf) is on


def test_ufw_default_policy() -> None:
    text = 'IPV6=yes\nDEFAULT_INPUT_POLICY="DROP"\nDEFAULT_OUTPUT_POLICY="ACCEPT"\n'
    assert fw.ufw_input_policy(text) == '"DROP"'
    assert fw.ufw_input_policy(None) == ""


def test_front_end_firewalls_win() -> None:
    # moved from tests/tune/test_renderers.py (was tune.detect.choose_firewall)
    assert fw.front_end({"nftables": True, "firewalld": True})[0] == "firewalld"
    assert fw.front_end({"iptables": True, "ufw": True})[0] == "ufw"
    assert fw.front_end({}) == ("none", "no active firewall found")


# --------------------------------------------------------------------------- composed state

def test_our_rules_filter_for_doctor_but_do_not_count_for_tune() -> None:
    state = fw.live_state({"nftables": ok(nft_json(OURS)), "iptables": ok(IPT_S_OURS)},
                          None, None, False)
    assert state.managers == ("iptables", "nftables")  # doctor evaluates them
    assert state.enabled == () and not any(state.active().values())
    assert state.nft is not None and state.iptables == IPT_S_OURS


def test_firewalld_running_is_enabled_and_its_zones_replace_nft() -> None:
    outs = {"firewalld": ok(ZONES), "nftables": ok(nft_json(("inet", "firewalld", "input",
                                                               ["drop"])))}
    state = fw.live_state(outs, None, None, True)
    assert state.managers == ("firewalld",) and state.firewalld == ZONES
    assert state.active() == {"firewalld": True, "ufw": False, "nftables": True,
                              "iptables": False}
    assert fw.front_end(state.active())[0] == "firewalld"


def test_ufw_active_only_with_its_status_but_enabled_by_its_conf() -> None:
    outs = {"ufw": ok("Status: inactive\n"), "iptables": ok(IPT_SAVE_THEIRS)}
    state = fw.live_state(outs, "ENABLED=yes\n", 'DEFAULT_INPUT_POLICY="DROP"\n', False)
    assert state.managers == ("iptables",) and state.ufw_status is None
    assert state.enabled == ("ufw", "iptables") and state.ufw_policy == '"DROP"'
    active = fw.live_state({"ufw": ok("Status: active\n"), "iptables": ok(IPT_SAVE_THEIRS)},
                           "ENABLED=yes\n", None, False)
    assert active.managers == ("ufw",)  # ufw's iptables chains are ufw's rules


def test_unanswered_and_failed_tools_are_unreadable() -> None:
    outs = {"nftables": CommandOutput(1, "", "Operation not permitted"), "iptables": None,
            "ufw": ok("Status: active\n")}
    state = fw.live_state(outs, None, None, False)
    assert state.unreadable == ("iptables", "nftables")
    assert state.managers == ("ufw",)
    broken = fw.live_state({"nftables": ok("{broken")}, None, None, False)
    assert broken.unreadable == ("nftables",) and broken.managers == ()
    assert broken.facts() == {"managers": ["none"], "unreadable": ["nftables"], "why": []}


def test_image_state_reads_files_only() -> None:
    state = fw.image_state("ENABLED=yes\n", None, True)
    assert state.where == "image" and state.managers == () and state.unreadable == ()
    assert state.enabled == ("firewalld", "ufw")


# --------------------------------------------------------------------------- the edge

class Tools:
    """A canned runner: records (argv, timeout); answers by argv."""

    def __init__(self, answers: dict[tuple[str, ...], CommandOutput | None]) -> None:
        self.answers = answers
        self.calls: list[tuple[tuple[str, ...], float]] = []

    def __call__(self, argv: Sequence[str], timeout: float) -> CommandOutput | None:
        self.calls.append((tuple(argv), timeout))
        return self.answers.get(tuple(argv))

    def which(self, name: str) -> str | None:
        return f"/usr/sbin/{name}" if any(a[0] == name for a in self.answers) else None


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_read_state_asks_what_is_installed_and_running(tmp_path: Path) -> None:
    tools = Tools({fw.COMMANDS["nftables"]: ok(nft_json(THEIRS_EMPTY)),
                   fw.COMMANDS["firewalld"]: ok(ZONES), fw.COMMANDS["ufw"]: ok("x")})
    state = fw.read_state(tmp_path, run=tools, which=tools.which, timeout=3.0)
    # firewalld not running, ufw not enabled, iptables-save not installed: only nft asked
    assert tools.calls == [(fw.COMMANDS["nftables"], 3.0)]
    assert state.managers == () and state.enabled == ("nftables",)
    write(tmp_path, "proc/812/comm", "firewalld\n")
    write(tmp_path, "etc/ufw/ufw.conf", "ENABLED=yes\n")
    tools.calls.clear()
    state = fw.read_state(tmp_path, run=tools, which=tools.which)
    assert {argv for argv, _ in tools.calls} == {fw.COMMANDS[n] for n in
                                                 ("nftables", "firewalld", "ufw")}
    assert all(t == fw.TIMEOUT_S for _, t in tools.calls)
    assert state.managers == ("firewalld",) and state.unreadable == ()
    assert state.enabled == ("firewalld", "ufw", "nftables")


def test_read_state_of_an_image_runs_nothing(tmp_path: Path) -> None:
    tools = Tools({fw.COMMANDS["nftables"]: ok(nft_json(THEIRS_EMPTY))})
    write(tmp_path, "etc/" + fw.FIREWALLD_WANTS, "")
    write(tmp_path, "etc/ufw/ufw.conf", "ENABLED=no\n")
    state = fw.read_state(tmp_path, live=False, run=tools, which=tools.which)
    assert tools.calls == [] and state.enabled == ("firewalld",) and state.where == "image"


def test_process_running(tmp_path: Path) -> None:
    write(tmp_path, "1/comm", "systemd\n")
    write(tmp_path, "self/comm", "firewalld\n")  # not a pid
    assert not fw.process_running(tmp_path, "firewalld")
    write(tmp_path, "77/comm", "firewalld\n")
    assert fw.process_running(tmp_path, "firewalld")
    assert not fw.process_running(tmp_path / "absent", "firewalld")


# --------------------------------------------------------------------------- real tools

@pytest.mark.root
@requires_netns
def test_real_tools_in_a_namespace(tmp_path: Path) -> None:
    """tune's table alone: doctor sees a filtering nftables, tune sees nothing of the user's;
    a user table next to it: both see it."""
    ns = unique_name("netfw")
    subprocess.run(["ip", "netns", "add", ns], check=True)

    def in_ns(*argv: str) -> None:
        subprocess.run(["ip", "netns", "exec", ns, *argv], check=True, capture_output=True)

    def run(argv: Sequence[str], timeout: float) -> CommandOutput | None:
        return run_command(["ip", "netns", "exec", ns, *argv], timeout)

    try:
        in_ns("nft", "add", "table", "inet", "ddpnet")
        in_ns("nft", "add", "chain", "inet", "ddpnet", "input",
              "{ type filter hook input priority -10; policy accept; }")
        in_ns("nft", "add", "rule", "inet", "ddpnet", "input", "tcp", "dport", "29500", "drop")
        state = fw.read_state(tmp_path, run=run, which=shutil.which)
        assert "nftables" in state.managers and not state.active()["nftables"]
        in_ns("nft", "add", "table", "inet", "mine")
        in_ns("nft", "add", "chain", "inet", "mine", "input",
              "{ type filter hook input priority 0; policy accept; }")
        state = fw.read_state(tmp_path, run=run, which=shutil.which)
        assert state.active()["nftables"]
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def test_no_packet_filter_tool_is_unknown_not_no_firewall() -> None:
    state = fw.live_state({}, None, None, False)
    assert state.unreadable == ("nftables", "iptables") and state.managers == ()
    assert state.unknown().endswith(f"({fw.NO_TOOLS})")
    # firewalld's own rules were read: what it filters is known without nft
    zones = fw.live_state({"firewalld": ok("public (active)\n  target: default\n")}, None,
                          None, True)
    assert zones.unreadable == () and zones.unknown() == ""
