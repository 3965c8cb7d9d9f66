"""The pure comparison layer with fact fixtures (the causes the lab cannot easily inject)."""

from __future__ import annotations

from typing import Any

from ddpnet.check.compare import NodeFacts, compare_facts, doctor_as_judged


def _node(rank: int, **over: Any) -> NodeFacts:
    facts: dict[str, Any] = {
        "hostname": f"n{rank}", "address": f"10.0.0.{rank + 1}", "interface": "eth0",
        "subnet": "10.0.0.0/24", "mtu": 1500, "python": "3.11.7", "torch": "2.13.0+cpu",
        "cuda": None, "nccl": None, "hostname_loopback": False, "clock_offset_s": 0.01,
    }
    facts.update(over)
    return NodeFacts(rank, facts)


def _ids(causes: list[Any]) -> list[str]:
    return [c.id for c in causes]


def test_identical_nodes_have_no_cause() -> None:
    assert compare_facts([_node(r) for r in range(4)]) == []


def test_torch_version_mismatch_names_the_odd_node() -> None:
    nodes = [_node(0), _node(1), _node(2, torch="2.12.1+cpu"), _node(3)]
    (cause,) = compare_facts(nodes)
    assert cause.id == "version-mismatch" and cause.ranks == (2,)
    assert cause.hosts == ("n2 (10.0.0.3)",)
    assert "2.12.1+cpu" in cause.detail and "torch==2.13.0+cpu" in cause.fix


def test_python_and_nccl_mismatch_are_separate_causes() -> None:
    nodes = [_node(0, nccl="2.21.5"), _node(1, nccl="2.18.1", python="3.10.12")]
    causes = compare_facts(nodes)
    assert _ids(causes) == ["version-mismatch", "version-mismatch"]
    assert {c.data["key"] for c in causes} == {"python", "nccl"}
    # a tie goes to rank 0's value: rank 1 is the odd one
    assert all(c.ranks == (1,) for c in causes)


def test_mtu_mismatch_fix_names_the_interface() -> None:
    nodes = [_node(0), _node(1, mtu=9000), _node(2), _node(3)]
    (cause,) = compare_facts(nodes)
    assert cause.id == "mtu-mismatch" and cause.ranks == (1,)
    assert "ip link set dev eth0 mtu 1500" in cause.fix


def test_clock_skew_beyond_one_second_is_a_warning() -> None:
    nodes = [_node(0, clock_offset_s=0.0), _node(1, clock_offset_s=-3.4), _node(2),
             _node(3, clock_offset_s=0.9)]
    (cause,) = compare_facts(nodes)
    assert cause.id == "clock-skew" and cause.ranks == (1,) and cause.severity == "warn"
    assert "-3.40 s" in cause.detail and "timedatectl set-ntp true" in cause.fix


def _host_rank(rank: int, host: int, offset: float) -> NodeFacts:
    return _node(rank, hostname=f"n{host}", address=f"10.0.0.{host + 1}", clock_offset_s=offset)


def test_a_rank_that_read_the_plan_late_is_not_a_skewed_clock_when_its_host_read_it_in_time(
        ) -> None:
    """Delivery delay only adds to a reading: one prompt rank of a host clears the host."""
    late = [_host_rank(8 * h + i, h, 0.05 + 2.5 * i) for h in range(3) for i in range(8)]
    assert compare_facts(late) == []


def test_a_skewed_host_is_one_host_with_all_its_ranks_and_its_nearest_reading() -> None:
    nodes = [_host_rank(i, 0, 0.0) for i in range(8)] + \
        [_host_rank(8 + i, 1, -4.0 + 0.3 * i) for i in range(8)]
    (cause,) = compare_facts(nodes)
    assert cause.id == "clock-skew" and cause.hosts == ("n1 (10.0.0.2)",)
    assert cause.ranks == tuple(range(8, 16))
    assert "on 1 host(s): n1 (10.0.0.2) -4.00 s (rank(s) 8-15)" in cause.detail, cause.detail
    assert cause.evidence == ("n1 (10.0.0.2): clock -4.00 s from rank 0's, the least of its "
                              "rank(s) 8-15' readings over the store at the start signal",)


def test_the_clock_skew_detail_names_the_worst_hosts_and_counts_the_rest() -> None:
    """The detail is in every rank's line: a few hosts and a count, the evidence has all."""
    nodes = [_host_rank(0, 0, 0.0)] + [_host_rank(h, h, 1.5 + h / 10) for h in range(1, 21)]
    (cause,) = compare_facts(nodes)
    assert len(cause.hosts) == 20 and len(cause.evidence) == 20
    assert "n20 (10.0.0.21) +3.50 s (rank(s) 20)" in cause.detail
    assert "n12 (10.0.0.13)" not in cause.detail and "and 12 more host(s);" in cause.detail
    assert len(cause.detail) < 800, len(cause.detail)


def test_interface_mismatch_names_the_node_in_another_network() -> None:
    nodes = [_node(0), _node(1), _node(2, interface="docker0", address="172.17.0.1",
                                      subnet="172.17.0.0/16"), _node(3)]
    (cause,) = compare_facts(nodes)
    assert cause.id == "interface-mismatch" and cause.ranks == (2,)
    assert "docker0" in cause.detail and "10.0.0.0/24" in cause.fix


def test_loopback_address_across_hosts_is_hostname_loopback() -> None:
    nodes = [_node(0), _node(1, interface="lo", address="127.0.1.1", subnet="127.0.0.0/8",
                            hostname_loopback=True), _node(2)]
    causes = compare_facts(nodes)
    assert _ids(causes) == ["hostname-loopback"]
    assert causes[0].ranks == (1,) and causes[0].severity == "fail"


def test_hostname_loopback_alone_warns_only_when_the_interface_is_not_pinned() -> None:
    warned = compare_facts([_node(0), _node(1, hostname_loopback=True)])
    assert _ids(warned) == ["hostname-loopback"] and warned[0].severity == "warn"
    pinned = compare_facts([_node(0), _node(1, hostname_loopback=True,
                                             interface_pinned=True)])
    assert pinned == []


def test_everything_on_one_host_over_loopback_is_fine() -> None:
    nodes = [_node(r, hostname="box", address="127.0.0.1", interface="lo",
                   subnet="127.0.0.0/8", hostname_loopback=True) for r in range(4)]
    assert compare_facts(nodes) == []


def test_selection_problem_reported_by_a_rank_becomes_its_cause() -> None:
    bad = _node(1, selection_problems=[["hostname-loopback",
                                        "GLOO_SOCKET_IFNAME=lo: binds loopback",
                                        "unset GLOO_SOCKET_IFNAME"]])
    causes = compare_facts([_node(0), bad, _node(2)])
    assert _ids(causes) == ["hostname-loopback"]
    assert causes[0].ranks == (1,) and causes[0].fix == "unset GLOO_SOCKET_IFNAME"


def _names(master: str, master_addrs: list[str], host0_addrs: list[str] | None = None,
           launcher: str = "manual") -> dict[str, Any]:
    out: dict[str, Any] = {"launcher": launcher,
                           "master": {"name": master, "addresses": master_addrs, "error": ""}}
    if host0_addrs is not None:
        out["host0"] = {"name": "n0", "addresses": host0_addrs,
                        "error": "" if host0_addrs else "Name or service not known"}
    return out


def test_names_resolving_to_rank_0_everywhere_have_no_cause() -> None:
    nodes = [_node(0, own_addresses=["10.0.0.1", "192.168.9.1"],
                   names=_names("n0", ["127.0.1.1"], ["127.0.1.1"]))]  # rank 0's own view
    nodes += [_node(r, names=_names("n0", ["192.168.9.1"], ["10.0.0.1"])) for r in (1, 2)]
    assert compare_facts(nodes) == []  # any address of rank 0 will do


def test_rank_0_hostname_loopback_on_one_worker_is_named_for_that_worker() -> None:
    good = _names("10.0.0.1", ["10.0.0.1"], ["10.0.0.1"])
    nodes = [_node(0, names=good), _node(1, names=good),
             _node(2, names=_names("10.0.0.1", ["10.0.0.1"], ["127.0.1.1", "10.0.0.1"]))]
    (cause,) = compare_facts(nodes)
    assert cause.id == "name-mismatch" and cause.ranks == (2,) and cause.hosts == ("n2 (10.0.0.3)",)
    assert cause.severity == "warn"  # MASTER_ADDR is an address: only torchrun's names break
    assert "n0 (rank 0's hostname, 10.0.0.1 on rank 0)" in cause.detail
    assert "to 127.0.1.1, 10.0.0.1" in cause.detail
    assert "getent hosts n0" in cause.fix and "export MASTER_ADDR=10.0.0.1" in cause.fix
    torchrun = [NodeFacts(n.rank, {**n.facts, "names": {**n.facts["names"],
                                                         "launcher": "torchrun"}})
                for n in nodes]
    assert compare_facts(torchrun)[0].severity == "fail"


def test_stale_or_missing_master_name_on_a_worker_is_named() -> None:
    nodes = [_node(0, names=_names("n0", ["10.0.0.1"])),
             _node(1, names=_names("n0", ["10.0.0.99", "10.0.0.1"])),
             _node(2, names=_names("n0", [], []))]
    causes = compare_facts(nodes)
    master = next(c for c in causes if "MASTER_ADDR" in c.detail)
    assert master.ranks == (1, 2) and "rank 1 on n1 (10.0.0.2): to 10.0.0.99" in master.detail
    assert master.severity == "fail"  # rank 2 resolves nothing
    assert "rank 2 on n2 (10.0.0.3): to nothing (no address)" in master.detail


def test_missing_name_facts_are_not_judged() -> None:
    nodes = [_node(0), _node(1, names={"launcher": "manual"}), _node(2)]
    assert compare_facts(nodes) == []


def test_ipv6_rank_among_ipv4_ranks_is_family_mismatch_not_interface_mismatch() -> None:
    nodes = [_node(0, own_addresses=["10.0.0.1", "2001:2::1"]),
             _node(1, address="2001:2::2", subnet="2001:2::/64",
                            names=_names("n0", ["2001:2::1"])), _node(2)]
    (cause,) = compare_facts(nodes)
    assert cause.id == "family-mismatch" and cause.ranks == (1,)
    assert "rank 1 IPv6 2001:2::2 (MASTER_ADDR n0 resolves there to 2001:2::1)" in cause.detail
    assert "the other 2 rank(s) IPv4" in cause.detail and "IPv4" in cause.fix


def test_a_rank_whose_doctor_failed_is_never_a_pass() -> None:
    # rank 0's own doctor says fail with nothing listed (its rendezvous.* checks raced with
    # this very rendezvous): no cause; rank 2's named failures and rank 3's lost facts are
    nodes = [_node(0, doctor={"verdict": "fail", "failed": []}),
             _node(1, doctor={"verdict": "warn", "failed": []}),
             _node(2, doctor={"verdict": "fail", "failed": ["software.shm",
                                                            "sysctl.somaxconn"]}),
             NodeFacts(3, {"hostname": "n3", "address": "10.0.0.4",
                           "error": "facts failed: resolver timed out"})]
    causes = compare_facts(nodes)
    assert _ids(causes) == ["doctor-failed", "doctor-failed"]
    lost, failed = causes
    assert lost.ranks == (3,) and "resolver timed out" in lost.detail and "n3" in lost.fix
    assert failed.ranks == (2,) and failed.severity == "fail"
    assert "software.shm, sysctl.somaxconn" in failed.detail and "ddpnet doctor" in failed.fix
    assert "rank 2 on n2 (10.0.0.3): doctor check software.shm failed" in failed.evidence


def _debian(rank: int, **over: Any) -> NodeFacts:
    """A default Debian node: its hostname on 127.0.1.1, so its doctor fails names.hostname."""
    facts: dict[str, Any] = {"hostname": "vm", "hostname_loopback": True,
                             "doctor": {"verdict": "fail", "failed": ["names.hostname"]}}
    return _node(rank, **{**facts, **over})


def test_a_doctor_finding_check_judges_is_one_cause_with_one_severity() -> None:
    # four clones named "vm", every hostname on 127.0.1.1: hostname-loopback (a warning:
    # check pinned the interface), not also doctor-failed naming "vm, vm, vm, vm"
    causes = compare_facts([_debian(r) for r in range(4)])
    assert _ids(causes) == ["hostname-loopback"], causes
    (cause,) = causes
    assert cause.severity == "warn" and cause.ranks == (0, 1, 2, 3)
    assert cause.hosts == tuple(f"vm (10.0.0.{r + 1})" for r in range(4))  # by address
    # the node table tells the same story
    summary = doctor_as_judged({"verdict": "fail", "failed": ["names.hostname"]}, 2, causes)
    assert summary["failed"] == [] and summary["verdict"] == "warn"
    assert summary["judged"] == {"names.hostname": "hostname-loopback (warn)"}


def test_doctor_failed_carries_only_what_no_cause_judges_naming_clones_by_address() -> None:
    nodes = [_debian(0), _debian(1, doctor={"verdict": "fail",
                                            "failed": ["names.hostname", "software.shm"]}),
             _debian(2, doctor={"verdict": "fail", "failed": ["software.shm"]})]
    failed = next(c for c in compare_facts(nodes) if c.id == "doctor-failed")
    assert failed.ranks == (1, 2) and "names.hostname" not in failed.detail
    assert failed.fix.startswith("run `ddpnet doctor` on vm (10.0.0.2), vm (10.0.0.3) ")


def test_every_rank_on_one_host_over_loopback_is_not_a_doctor_failure() -> None:
    # two processes started by hand, MASTER_ADDR=127.0.0.1 WORLD_SIZE=2: each doctor thinks
    # it is a 2-node job on loopback; check sees both ranks on one host, where that is right
    doctor = {"verdict": "fail",
              "failed": ["names.hostname", "names.master", "interfaces.selected"]}
    nodes = [_node(r, hostname="box", address="127.0.0.1", interface="lo",
                   subnet="127.0.0.0/8", hostname_loopback=True, doctor=doctor)
             for r in range(2)]
    assert compare_facts(nodes) == []
    assert doctor_as_judged(doctor, 0, []) == {
        "verdict": "warn", "failed": [], "judged": {"names.hostname": "pass",
                                                    "names.master": "pass",
                                                    "interfaces.selected": "pass"}}


def test_doctor_failure_of_a_rank_already_named_is_not_repeated() -> None:
    nodes = [_node(0), _node(1), _node(2, torch="2.12.1+cpu",
                                         doctor={"verdict": "fail", "failed": ["software"]})]
    assert _ids(compare_facts(nodes)) == ["version-mismatch"]


def test_clock_skew_says_what_it_breaks_and_fails_only_where_torchrun_compares_clocks() -> None:
    small = compare_facts([_node(0), _node(1, clock_offset_s=2.5)])
    assert _ids(small) == ["clock-skew"] and small[0].severity == "warn"
    assert "gloo, NCCL and the store are not hit" in small[0].detail
    assert "torchrun" not in small[0].detail  # within torchrun's heartbeat expiry
    far = [_node(0), _node(1, clock_offset_s=-60.0), _node(2)]
    (plain,) = compare_facts(far)
    assert plain.severity == "warn" and "if the job uses it" in plain.detail
    assert "torchrun's c10d/etcd rendezvous is (more than 15 s" in plain.detail
    torchrun = [NodeFacts(n.rank, {**n.facts, "names": {"launcher": "torchrun"}}) for n in far]
    (under,) = compare_facts(torchrun)
    assert under.severity == "fail" and under.ranks == (1,)
    assert "launched by torchrun: its rendezvous expires heartbeats after 15 s" in under.evidence


def test_loopback_addresses_of_clones_are_named_by_address() -> None:
    nodes = [_node(r, hostname="vm", interface="lo", address="127.0.1.1", subnet="127.0.0.0/8",
                   netns=f"ns{r}") for r in range(2)]
    nodes = [NodeFacts(n.rank, {**n.facts, "address": f"127.0.1.{n.rank + 1}"}) for n in nodes]
    (cause,) = [c for c in compare_facts(nodes) if c.id == "hostname-loopback"]
    assert cause.hosts == ("vm (127.0.1.1)", "vm (127.0.1.2)") and cause.severity == "fail"
