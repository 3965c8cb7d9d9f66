"""The rule-set evaluators against real ``nft -j list ruleset`` / ``iptables-save`` dumps
(captured from a scratch namespace, see fixtures/firewall) and firewalld/ufw output."""

from __future__ import annotations

import pytest

from ddpnet.doctor import firewall_rules as fr
from tests.doctor.helpers import fixture

PEER = "198.18.0.7"
OUTSIDER = "203.0.113.9"


def nft(name: str, port: int, src: str | None = PEER, skip_iptables: bool = False
        ) -> fr.Decision | None:
    return fr.evaluate_nft(fixture(f"firewall/{name}"), fr.Packet(port, src, "198.18.0.3",
                                                                    "eth0"), skip_iptables)


def ipt(name: str, port: int, src: str | None = PEER) -> fr.Decision | None:
    return fr.evaluate_iptables(fixture(f"firewall/{name}"),
                                fr.Packet(port, src, "198.18.0.3", "eth0"))


@pytest.mark.parametrize(("port", "src", "verdict"), [
    (29500, PEER, "accept"), (29400, PEER, "accept"), (45000, PEER, "accept"),
    (60999, PEER, "accept"), (29500, OUTSIDER, "drop"), (61000, PEER, "drop"),
])
def test_nft_cluster_rule_set(port: int, src: str, verdict: str) -> None:
    d = nft("nft_cluster_open.json", port, src)
    assert d is not None and d.verdict == verdict, d
    assert not d.uncertain


def test_nft_policy_drop_names_the_policy_and_chain() -> None:
    d = nft("nft_policy_drop_master_only.json", 40000)
    assert d is not None and d.verdict == "drop"
    assert "policy drop" in d.by and d.where == "inet filter input"
    assert nft("nft_policy_drop_master_only.json", 29500).verdict == "accept"  # type: ignore


def test_nft_explicit_drop_rule_is_shown() -> None:
    d = nft("nft_block_master.json", 29500)
    assert d is not None and d.verdict == "drop"
    assert "tcp dport 29500" in d.by and d.where == "ip drlab input"
    assert nft("nft_block_master.json", 29501).verdict == "accept"  # type: ignore


@pytest.mark.parametrize(("port", "src", "iif", "verdict", "by"), [
    (29500, PEER, "eth0", "accept", "tcp dport 29500"),      # accepted inside the jump
    (29400, PEER, "eth0", "accept", "tcp dport 29400"),
    (40000, PEER, "eth0", "drop", "policy drop"),            # return, then the policy
    (29500, OUTSIDER, "eth0", "drop", "policy drop"),        # no jump from outside
    (29500, PEER, "eth1", "drop", "vmap"),                   # the verdict map drops eth1
    (29500, PEER, "lo", "accept", "vmap"),
])
def test_nft_jump_return_and_vmap(port: int, src: str, iif: str, verdict: str,
                                  by: str) -> None:
    d = fr.evaluate_nft(fixture("firewall/nft_jump_vmap.json"), fr.Packet(port, src, None, iif))
    assert d is not None and d.verdict == verdict and by in d.by, d
    assert not d.uncertain


def test_nft_named_set_is_reported_uncertain() -> None:
    d = nft("nft_named_set.json", 29500)
    assert d is not None and d.verdict == "drop"
    assert d.uncertain and "@trusted" in d.uncertain[0]


def test_nft_without_source_knowledge_is_uncertain() -> None:
    d = nft("nft_cluster_open.json", 29500, src=None)
    assert d is not None and d.verdict == "drop" and d.uncertain


def test_nft_no_input_chain_means_no_decision() -> None:
    assert fr.evaluate_nft('{"nftables": []}', fr.Packet(29500)) is None


@pytest.mark.parametrize(("port", "src", "verdict"), [
    (29500, PEER, "accept"), (29400, PEER, "accept"), (40000, PEER, "accept"),
    (29500, OUTSIDER, "reject"), (22, OUTSIDER, "accept"), (61000, PEER, "reject"),
])
def test_iptables_user_chain_and_multiport(port: int, src: str, verdict: str) -> None:
    d = ipt("ipt_cluster_chain.txt", port, src)
    assert d is not None and d.verdict == verdict, d


def test_iptables_block_and_policy() -> None:
    d = ipt("ipt_block_master.txt", 29500)
    assert d is not None and d.verdict == "drop" and "--dport 29500" in d.by
    assert ipt("ipt_block_master.txt", 29501).verdict == "accept"  # type: ignore
    d = ipt("ipt_policy_drop.txt", 29500)
    assert d is not None and d.verdict == "drop" and "policy" in d.by


def test_iptables_unknown_match_is_uncertain() -> None:
    text = "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -m recent --rcheck -j DROP\nCOMMIT\n"
    d = fr.evaluate_iptables(text, fr.Packet(29500, PEER))
    assert d is not None and d.verdict == "accept" and "-m recent" in d.uncertain[0]


def test_iptables_negated_source() -> None:
    text = ("*filter\n:INPUT ACCEPT [0:0]\n-A INPUT ! -s 198.18.0.0/24 -p tcp --dport 29500 "
            "-j DROP\nCOMMIT\n")
    assert fr.evaluate_iptables(text, fr.Packet(29500, PEER)).verdict == "accept"  # type: ignore
    assert fr.evaluate_iptables(text, fr.Packet(29500, OUTSIDER)).verdict == "drop"  # type: ignore


ZONES = """\
public (default, active)
  target: default
  icmp-block-inversion: no
  interfaces: eth0
  sources:
  services: dhcpv6-client ssh
  ports: 29500/tcp
  protocols:

trusted (active)
  target: ACCEPT
  interfaces:
  sources: 198.18.1.0/24
  services:
  ports:
"""


def test_firewalld_zones() -> None:
    assert fr.evaluate_firewalld(ZONES, fr.Packet(29500, PEER, iif="eth0")).verdict == "accept"  # type: ignore
    d = fr.evaluate_firewalld(ZONES, fr.Packet(40000, PEER, iif="eth0"))
    assert d is not None and d.verdict == "reject" and "zone public" in d.by
    d = fr.evaluate_firewalld(ZONES, fr.Packet(40000, "198.18.1.5", iif="eth0"))
    assert d is not None and d.verdict == "accept" and "trusted" in d.by


UFW = """\
Status: active

To                         Action      From
--                         ------      ----
22/tcp                     ALLOW       Anywhere
29500/tcp                  ALLOW       198.18.0.0/24
32768:60999/tcp            DENY        Anywhere
22/tcp (v6)                ALLOW       Anywhere (v6)
"""


def test_ufw_first_match_and_default() -> None:
    assert fr.evaluate_ufw(UFW, "DROP", fr.Packet(29500, PEER)).verdict == "accept"  # type: ignore
    d = fr.evaluate_ufw(UFW, '"DROP"', fr.Packet(29500, OUTSIDER))
    assert d is not None and d.verdict == "drop" and "default" in d.by
    d = fr.evaluate_ufw(UFW, "DROP", fr.Packet(40000, PEER))
    assert d is not None and d.verdict == "drop" and "32768:60999" in d.by
    assert fr.evaluate_ufw("Status: inactive\n", "DROP", fr.Packet(1)) is None


def test_iptables_goto_and_return() -> None:
    text = ("*filter\n:INPUT ACCEPT [0:0]\n:CL - [0:0]\n:RJ - [0:0]\n"
            "-A INPUT -s 198.18.0.0/24 -g CL\n-A INPUT -j RJ\n"
            "-A CL -p tcp --dport 29500 -j ACCEPT\n-A CL -p tcp --dport 40000 -j RETURN\n"
            "-A RJ -j DROP\nCOMMIT\n")
    evaluate = fr.evaluate_iptables
    assert evaluate(text, fr.Packet(29500, PEER)).verdict == "accept"  # type: ignore[union-attr]
    # goto: falling off CL (or RETURN in it) ends INPUT too: the policy decides, not RJ
    d = evaluate(text, fr.Packet(40000, PEER))
    assert d is not None and d.verdict == "accept" and "policy" in d.by
    d = evaluate(text, fr.Packet(29500, OUTSIDER))
    assert d is not None and d.verdict == "drop" and d.by == "-A RJ -j DROP"
