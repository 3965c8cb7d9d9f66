"""What a rank says about the interface this check selected (pure parts)."""

from __future__ import annotations

from ddpnet.check.stages.facts import (
    doctor_summary,
    interface_facts,
    selection_facts,
    selection_problems,
)
from ddpnet.doctor.base import CheckResult
from ddpnet.net.routes import Route
from ddpnet.net.select import select
from tests.net.fixtures import LO, cfg, iface

ETH0 = iface("eth0", "198.18.0.3/24", mtu=9000)
ROUTE = Route("eth0", "198.18.0.3", None, dst="198.18.0.1")


def test_automatic_choice_is_not_pinned_and_has_no_problems() -> None:
    sel = select(cfg(), (ETH0, LO), ROUTE, {})
    assert selection_facts(sel) == {"interface": "eth0", "address": "198.18.0.3",
                                    "interface_pinned": False, "selection_problems": []}
    assert interface_facts(sel, (ETH0, LO)) == {"mtu": 9000, "subnet": "198.18.0.0/24"}


def test_a_user_pin_is_pinned_and_loopback_across_nodes_is_a_problem() -> None:
    eth1 = iface("eth1", "198.18.1.3/24")
    pinned = select(cfg(), (ETH0, eth1, LO), ROUTE, {"GLOO_SOCKET_IFNAME": "eth1"})
    facts = selection_facts(pinned)
    assert facts["interface"] == "eth1" and facts["interface_pinned"] is True
    assert interface_facts(pinned, (ETH0, eth1, LO))["subnet"] == "198.18.1.0/24"
    lo = select(cfg(), (ETH0, LO), ROUTE, {"GLOO_SOCKET_IFNAME": "lo",
                                          "TP_SOCKET_IFNAME": "nope0"})
    problems = selection_problems(lo)
    assert [p[0] for p in problems] == ["hostname-loopback", "ifname-missing"]
    assert problems[0][1].startswith("GLOO_SOCKET_IFNAME=lo: ") and problems[0][2]
    # TensorPipe's is named too (rpc only): the doctor fails it, so it is never a bare
    # doctor-failed
    assert problems[1][1].startswith("TP_SOCKET_IFNAME=nope0: ") and "init_rpc" in problems[1][1]
    assert selection_facts(lo)["interface_pinned"] is False


def test_interface_facts_of_an_unknown_interface_are_unknown() -> None:
    sel = select(cfg(), (ETH0, LO), ROUTE, {})
    assert interface_facts(sel, (LO,)) == {"mtu": None, "subnet": None}


def _result(check_id: str, status: str) -> CheckResult:
    return CheckResult(check_id, check_id.split(".")[0], status, "s")  # type: ignore[arg-type]


def test_a_failing_doctor_verdict_names_what_failed() -> None:
    """Issue 19: rank 0 reported {"verdict": "fail", "failed": []} when only rendezvous.*
    failed (they race with check's own rendezvous): verdict and list now agree."""
    only_rdzv = [_result("python.version", "pass"), _result("rendezvous.port", "fail")]
    summary = doctor_summary(only_rdzv)
    assert summary == {"verdict": "pass", "failed": [], "superseded": ["rendezvous.port"]}
    mixed = [_result("net.mtu", "warn"), _result("rendezvous.port", "fail"),
             _result("gpu.nccl", "fail")]
    summary = doctor_summary(mixed)
    assert summary["verdict"] == "fail" and summary["failed"] == ["gpu.nccl"]
    assert doctor_summary(mixed[:1]) == {"verdict": "warn", "failed": []}
    for checks in (only_rdzv, mixed, mixed[:1], []):
        s = doctor_summary(checks)
        assert (s["verdict"] == "fail") == bool(s["failed"])


def test_name_facts_resolve_master_and_rank_0_hostname_here() -> None:
    from ddpnet.check.stages.facts import name_facts
    from ddpnet.net.names import from_addresses

    asked: list[tuple[str, float]] = []

    def resolve(name: str, timeout: float) -> object:
        asked.append((name, timeout))
        return from_addresses(name, ["127.0.1.1"] if name == "n0" else [], "")

    got = name_facts("10.0.0.1", "n0", "torchrun", resolve=resolve)
    assert got["launcher"] == "torchrun"
    assert got["host0"] == {"name": "n0", "addresses": ["127.0.1.1"], "error": ""}
    assert got["master"]["name"] == "10.0.0.1"
    assert all(t <= 2.0 for _, t in asked)  # bounded: a dead DNS server costs 2 s
    assert "host0" not in name_facts("10.0.0.1", "", "manual", resolve=resolve)
