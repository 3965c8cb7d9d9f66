"""``doctor --slurm-health``'s decision: which failures drain a node, its reason, and whose
drain it may lift (pure; the real SLURM run is test_slurm_health_lab.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ddpnet.doctor.base import CheckResult
from ddpnet.doctor.health import (
    breaking,
    controller_address,
    decide,
    health_reason,
    parse_config,
)

FIX = ("nft insert rule inet filter input ip saddr 198.18.0.0/24 tcp dport 32768-60999 accept  "
       "(persist it in /etc/nftables.conf, or: ddpnet tune)")
EPHEMERAL = CheckResult("firewall.ephemeral", "firewall", "fail",
                        "32768:60999/tcp from 198.18.0.0/24 is dropped by nftables", "", FIX)
IFACE = CheckResult("interfaces.selected", "interfaces", "fail",
                    "no interface routes to MASTER_ADDR 198.18.0.1", "", "ip link set eth0 up")
#: failures that break no job: the rendezvous port (a job derives its own), software, sysctls
OTHERS = (CheckResult("firewall.master-port", "firewall", "fail", "29500/tcp dropped"),
          CheckResult("software.torch", "software", "fail", "torch missing"),
          CheckResult("sysctl.net.core.rmem_max", "sysctl", "warn", "small"),
          CheckResult("interfaces.bridges", "interfaces", "warn", "docker0 has an address"))


def test_only_failures_that_break_a_job_count() -> None:
    assert breaking((*OTHERS, EPHEMERAL, IFACE)) == (EPHEMERAL, IFACE)
    assert decide("n1", OTHERS, "IDLE", "").action == "none"


def test_a_failing_node_is_drained_with_the_check_and_its_fix() -> None:
    a = decide("n1", (EPHEMERAL,), "IDLE", "")
    assert a.action == "drain" and a.failing == ("firewall.ephemeral",)
    assert a.detail == ("ddpnet: doctor: firewall.ephemeral: 32768:60999/tcp from "
                        "198.18.0.0/24 is dropped by nftables; fix: nft insert rule inet filter "
                        "input ip saddr 198.18.0.0/24 tcp dport 32768-60999 accept (persist it "
                        "in /etc/nftables.conf, or: ddpnet tune)")
    assert len(a.detail.encode()) <= 255
    # a running job's node is drained too (no new job lands there; this one finishes)
    assert decide("n1", (EPHEMERAL,), "MIXED", "").action == "drain"


def test_a_reason_that_does_not_fit_keeps_whole_words_and_drops_the_fix() -> None:
    long = CheckResult("names.hostname", "names", "fail",
                       "gpu-node-0042.cluster.example.org resolves to 127.0.1.1 " * 8, "", FIX)
    reason = health_reason((long, IFACE))
    assert len(reason.encode()) <= 255 and "fix:" not in reason
    assert reason.startswith("ddpnet: doctor: names.hostname: gpu-node-0042.cluster.example.org")
    assert all(w in long.summary.split() or w in ("ddpnet:", "doctor:", "names.hostname:")
               for w in reason.split())
    assert "(+1 more)" in health_reason((EPHEMERAL, IFACE))


@pytest.mark.parametrize("state, reason, action, words", [
    # drained by ddpnet (the health check or a job's recovery), healthy again: resumed
    ("IDLE+DRAIN", "ddpnet: doctor: firewall.ephemeral: ...", "resume", "drained by ddpnet"),
    ("MIXED+DRAIN", "ddpnet: network: link down: rank 1 (n1)", "resume", "drained by ddpnet"),
    # DOWN as well (SLURM's not responding, an operator's, recovery's for an unreachable
    # node): whoever set it lifts it; the drain is kept with it
    ("DOWN+DRAIN", "ddpnet: network: link down: rank 1 (n1)", "none", "left DOWN+DRAIN"),
    ("DOWN*+DRAIN", "ddpnet: doctor: firewall.ephemeral: ...", "none", "State=RESUME` once"),
    # drained by someone else: never touched
    ("IDLE+DRAIN", "maintenance: disk swap", "none", "drained by someone else"),
    ("IDLE+DRAIN", "", "none", "reason: none"),
    ("IDLE", "", "none", "healthy"),
])
def test_a_healthy_node_is_resumed_only_from_ddpnets_own_drain(
        state: str, reason: str, action: str, words: str) -> None:
    a = decide("n1", (), state, reason)
    assert a.action == action and words in a.detail


def test_a_failing_node_drained_by_someone_else_is_left_alone() -> None:
    a = decide("n1", (EPHEMERAL,), "IDLE+DRAIN", "NHC: check_fs_mount /scratch")
    assert a.action == "none" and "drained by someone else" in a.detail
    own = decide("n1", (EPHEMERAL,), "IDLE+DRAIN", health_reason((EPHEMERAL,)))
    assert own.action == "none" and own.detail.startswith("already drained")
    other = decide("n1", (IFACE,), "DRAINING", health_reason((EPHEMERAL,)))  # a new cause
    assert other.action == "drain" and "interfaces.selected" in other.detail


def test_the_controller_address_from_scontrol_show_config() -> None:
    text = ("SlurmctldDebug          = info\nSlurmctldHost[0]        = lab-n0(198.18.0.1)\n"
            "SlurmctldHost[1]        = lab-n9(198.18.0.10)\n")
    assert controller_address(parse_config(text)) == "198.18.0.1"
    assert controller_address(parse_config("SlurmctldHost[0] = head\n")) == "head"
    assert controller_address({}) == ""


def test_outside_slurm_it_is_a_one_line_error_with_a_hint(tmp_path: Path, run_cli: Any) -> None:
    conf = tmp_path / "slurm.conf"  # a controller nobody runs: scontrol answers nothing
    conf.write_text("ClusterName=none\nSlurmctldHost=nohost.invalid\n")
    p = run_cli("doctor", "--slurm-health", "--node", "nosuch", env={"SLURM_CONF": str(conf)},
                timeout=120)
    assert p.returncode == 3, (p.stdout, p.stderr)
    assert p.stderr.splitlines()[0] == ("ddpnet: error: SLURM does not know node 'nosuch' "
                                        "(scontrol show node nosuch answered nothing)")
    assert p.stderr.splitlines()[1].startswith("hint: run it on a SLURM node")
    assert "Traceback" not in p.stderr


def test_the_odd_node_out_on_mtu_fails_and_is_told_the_peers_mtu() -> None:
    from ddpnet.doctor.health import mtu_against_peers

    low = mtu_against_peers("eth0", 1500, {"n0": 9000, "n2": 9000, "n3": 9000})
    assert low.status == "fail" and low.id == "interfaces.mtu-peers"
    assert low.summary == "eth0 mtu 1500 is below its peers' 9000 (3 of 3: n0, n2, n3)"
    assert low.fix.startswith("ip link set eth0 mtu 9000")
    high = mtu_against_peers("eth0", 9000, {"n0": 1500, "n2": 1500, "n3": 9000})
    assert high.status == "fail" and "above its peers' 1500 (2 of 3" in high.summary
    assert decide("n1", (low,), "IDLE", "").action == "drain"  # it breaks a job


@pytest.mark.parametrize("peers", [
    {"n0": 9000, "n2": 1500},  # the good nodes see the odd one among two: no majority
    {"n0": 9000},  # one peer: which of the two is odd is unknown
    {"n0": 1500, "n2": 1500, "n3": 9000},  # the same as most
])
def test_no_majority_against_it_blames_no_node(peers: dict[str, int]) -> None:
    from ddpnet.doctor.health import mtu_against_peers

    assert mtu_against_peers("eth0", 1500 if peers.get("n0") == 1500 else 9000,
                             peers).status == "pass"
    assert mtu_against_peers("eth0", 1500, {}).status == "skip"


def test_the_mtu_is_published_only_where_no_one_else_wrote() -> None:
    from ddpnet.doctor.health import published_mtu, with_mtu

    assert with_mtu("", 9000) == "ddpnet-mtu=9000" == with_mtu("(null)", 9000)
    assert with_mtu("ddpnet-mtu=1500", 9000) == "ddpnet-mtu=9000"
    assert with_mtu("rack=7", 9000) is None  # a site's own use of Extra: never overwritten
    assert published_mtu("ddpnet-mtu=9000") == 9000
    assert published_mtu("rack=7") is None and published_mtu("ddpnet-mtu=x") is None
