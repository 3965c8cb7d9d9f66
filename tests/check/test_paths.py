"""check.paths: the kernel's answers about the way in and back, judged (pure), and the
gathering with a fake lookup; real kernels answer in the lab tests (test_lab_paths.py)."""

from __future__ import annotations

from typing import Any

from ddpnet.check import mesh, paths
from ddpnet.check.causes import Cause
from ddpnet.net.routes import Lookup, Route, parse_lookup

SUBNET, ROUTED = "198.18.0.0/24", "198.19.1.0/24"
LABELS = ["n0 (198.18.0.1)", "n1 (198.18.0.2)", "n2 (198.18.0.3)"]


def _got(subnets: tuple[str, ...] = (SUBNET, SUBNET, SUBNET)) -> dict[int, dict[str, Any]]:
    return {r: {"address": f"198.18.0.{r + 1}", "subnet": s,
                "firewall": {"managers": ["none"], "unreadable": []}}
            for r, s in enumerate(subnets)}


def _lookup(ok: bool = True, dev: str = "eth0", via: str | None = None, table: str = "",
            error: str = "") -> dict[str, Any]:
    return {"command": "ip route get X", "ok": ok, "error": error, "table": table,
            "dev": dev if ok else None, "via": via}


def _paths(entry: dict[str, Any], *, rp: int = 0, arp: int = 0,
           subnet: str = SUBNET) -> dict[str, Any]:
    return {"iface": "eth0", "address": "198.18.0.3", "rp_filter": rp, "arp_ignore": arp,
            "subnets": {subnet: {"peer": "198.18.0.1", **entry}}}


INTO_2 = [["self", "ok", "filtered"], ["ok", "self", "filtered"], ["ok", "ok", "self"]]


def test_rp_filter_dropping_what_arrives_is_reverse_path_drop_with_its_evidence() -> None:
    entry = {"inbound": _lookup(False, error="Invalid argument"), "reply": _lookup(dev="eth1")}
    causes, explained = paths.analyze(INTO_2, _got(), LABELS,
                                      {2: _paths(entry, rp=1, arp=1)})
    [cause] = causes
    assert cause.id == "reverse-path-drop" and cause.ranks == (2,)
    assert explained == {(0, 2), (1, 2)}
    assert "rp_filter=1 drops what arrives on eth0" in cause.detail
    assert "route back leaves by eth1" in cause.detail and "arp_ignore=1" in cause.detail
    assert "rp_filter=2" in cause.fix and "GLOO_SOCKET_IFNAME=eth1" in cause.fix
    assert cause.confidence == "high" and cause.see_for_yourself.startswith("on n2")
    assert any("firewall" in r for r in cause.ruled_out) and len(cause.evidence) == 3
    assert "gloo" in cause.detail and "NCCL" in cause.detail


def test_replies_by_another_nic_through_a_policy_table_are_asymmetric_route() -> None:
    matrix = [["self", "ok", "filtered"], ["ok", "self", "filtered"],
              ["filtered", "filtered", "self"]]
    entry = {"inbound": _lookup(dev="lo"), "reply": _lookup(dev="wan0", via="198.19.254.254",
                                                             table="100")}
    causes, explained = paths.analyze(matrix, _got(), LABELS, {2: _paths(entry)})
    [cause] = causes
    assert cause.id == "asymmetric-route" and cause.ranks == (2,)
    assert explained == {(0, 2), (1, 2), (2, 0), (2, 1)}
    assert "leave by wan0 via 198.19.254.254 (routing table 100" in cause.detail
    assert "ip route add 198.18.0.0/24 dev eth0 table 100" in cause.fix


def test_a_missing_static_route_names_the_node_and_the_gateway_the_others_use() -> None:
    # rank 2 sits in a routed subnet; rank 1 lacks the route to it, rank 0 has it
    got = _got((SUBNET, SUBNET, ROUTED))
    matrix = [["self", "ok", "ok"], ["ok", "self", "no-route"], ["ok", "filtered", "self"]]
    have = {"inbound": _lookup(dev="lo"), "reply": _lookup(via="198.18.0.254")}
    lack = {"inbound": _lookup(dev="lo"), "reply": _lookup(False, error="Network is "
                                                                       "unreachable")}
    kernel = {0: _paths(have, subnet=ROUTED), 1: _paths(lack, subnet=ROUTED)}
    causes, explained = paths.analyze(matrix, got, LABELS, kernel)
    [cause] = causes
    assert cause.id == "missing-route" and cause.ranks == (1,)
    assert explained == {(1, 2), (2, 1)}
    assert "has no route to 198.19.1.0/24" in cause.detail and "Network is unreachable" \
        in cause.detail and "rank 0 routes it via 198.18.0.254" in cause.detail
    assert cause.fix.startswith("on n1 (198.18.0.2): ip route add 198.19.1.0/24 via "
                                "198.18.0.254 dev eth0")


def test_healthy_answers_explain_nothing_and_a_healthy_mesh_asks_nothing() -> None:
    entry = {"inbound": _lookup(dev="lo"), "reply": _lookup()}
    assert paths.analyze(INTO_2, _got(), LABELS, {2: _paths(entry)}) == ([], set())
    ok = [["self", "ok", "ok"], ["ok", "self", "ok"], ["ok", "ok", "self"]]
    bad = {"inbound": _lookup(False, error="Invalid argument"), "reply": _lookup(dev="eth1")}
    assert paths.analyze(ok, _got(), LABELS, {2: _paths(bad, rp=1)}) == ([], set())


def test_reverse_path_drop_folds_the_same_nodes_nic_warning() -> None:
    rp = Cause("reverse-path-drop", "d", "f", ranks=(2,))
    nic = Cause("nic-same-subnet", "d", "f", ranks=(2,), severity="warn")
    other = Cause("nic-same-subnet", "d", "f", ranks=(1,), severity="warn")
    assert paths.fold([rp, nic]) == [rp]
    assert paths.fold([rp, other]) == [rp, other]


def test_one_peer_per_subnet_is_asked() -> None:
    peers: list[list[Any] | None] = [["198.18.0.1", 1, 2, 1500, SUBNET],
                                     ["198.18.0.2", 1, 2, 1500, SUBNET],
                                     ["198.19.1.2", 1, 2, 1500, ROUTED], None]
    assert paths.representatives(peers, 1) == {SUBNET: "198.18.0.1", ROUTED: "198.19.1.2"}


def test_gather_asks_the_way_in_with_iif_and_the_way_back_from_the_address() -> None:
    asked = []

    def fake(dst: str, src: str, iif: str | None = None) -> Lookup:
        asked.append((dst, src, iif))
        return Lookup(f"ip route get {dst}", Route("eth0", "", None, dst))

    got = paths.gather("198.18.0.3", "eth0", {SUBNET: "198.18.0.1"},
                       {"net.ipv4.conf.all.rp_filter": "1"}.get, fake)
    assert asked == [("198.18.0.3", "198.18.0.1", "eth0"), ("198.18.0.1", "198.18.0.3", None)]
    assert got["rp_filter"] == 1 and got["subnets"][SUBNET]["reply"]["dev"] == "eth0"


def test_parse_lookup_reads_errors_and_policy_tables() -> None:
    dropped = parse_lookup("c", 2, "", "RTNETLINK answers: Invalid argument\n", "198.18.0.3")
    assert not dropped.ok and dropped.error == "Invalid argument"
    table = parse_lookup("c", 0, '[{"dst":"198.18.0.1","dev":"wan0","table":"100"}]', "",
                         "198.18.0.1")
    assert table.ok and table.table == "100" and table.route and table.route.iface == "wan0"
    main = parse_lookup("c", 0, '[{"dst":"198.18.0.1","dev":"eth0","table":"main"}]', "",
                        "198.18.0.1")
    assert main.table == ""


def test_a_node_whose_firewall_drops_nothing_is_not_told_to_open_ports() -> None:
    verdicts = [mesh.firewall_verdict(f) for f in (
        {"firewall": {"managers": ["none"], "unreadable": []}},
        {"doctor": {"failed": ["firewall.ephemeral"]}},
        {"firewall_checks": {"firewall.ephemeral": "pass"}},
        {})]
    assert verdicts == ["none", "drops", "accepts", None]
    for verdict, cause_id in (("none", "peer-unreachable"), ("drops", "peer-port-blocked")):
        [cause] = mesh.analyze(INTO_2, LABELS, [1, 2, 3], 29500, SUBNET,
                               firewalls=[None, None, verdict])
        assert cause.id == cause_id and cause.ranks == (2,)
    [cause] = mesh.analyze(INTO_2, LABELS, [1, 2, 3], 29500, SUBNET,
                           firewalls=[None, None, "none"])
    assert "not this host's firewall" in cause.detail and "security group" in cause.fix


def test_reject_and_drop_say_what_each_does_to_gloo_and_nccl() -> None:
    refused = [["self", "ok", "refused"], ["ok", "self", "refused"], ["ok", "ok", "self"]]
    addresses = ["198.18.0.1", "198.18.0.2", "198.18.0.3"]
    [cause] = mesh.analyze(refused, LABELS, [1, 2, 3], 29500, SUBNET,
                           firewalls=[None, None, "drops"], addresses=addresses)
    assert "refused: rejected with a reset: plain gloo fails within seconds" in cause.detail
    # rank 2 has the highest address: gloo dials from it, never into it
    assert "plain gloo still connects" in cause.detail
    [cause] = mesh.analyze(INTO_2, LABELS, [1, 2, 3], 29500, SUBNET,
                           firewalls=[None, None, "drops"],
                           addresses=["198.18.0.1", "198.18.0.4", "198.18.0.3"])
    assert "filtered: dropped (no answer): plain gloo's connect waits out" in cause.detail
    assert "plain gloo breaks on its pairs with rank(s) 1" in cause.detail
    assert mesh.gloo_dialers(2, [0, 1], ["198.18.0.1", "198.18.0.4", "198.18.0.3"]) == [1]


def test_a_subnet_nobody_routes_is_the_odd_ranks_interface_not_everyones_route() -> None:
    # rank 2 advertises a docker0-like address in a network no rank routes: the others'
    # missing routes and its replies by eth0 are that choice's consequence
    got = _got((SUBNET, SUBNET, "198.19.254.0/24"))
    matrix = [["self", "ok", "no-route"], ["ok", "self", "no-route"],
              ["filtered", "filtered", "self"]]
    lack = {"inbound": _lookup(dev="lo"), "reply": _lookup(False, error="Network is "
                                                                       "unreachable")}
    back = {"inbound": _lookup(dev="lo"), "reply": _lookup(dev="eth0")}
    kernel = {0: _paths(lack, subnet="198.19.254.0/24"),
              1: _paths(lack, subnet="198.19.254.0/24"),
              2: {**_paths(back), "iface": "docker0"}}
    assert paths.analyze(matrix, got, LABELS, kernel) == ([], set())


def test_a_plain_jobs_bindings_are_the_hostnames_address_and_nccls_own_pick() -> None:
    facts = {"hostname_addresses": ["198.18.0.2"],
             "ifaddrs": {"eth0": ["198.18.0.2/24"], "eth1": ["198.18.0.202/24"]},
             "library_picks": [{"var": "NCCL_SOCKET_IFNAME", "value": None, "iface": "eth0",
                                "address": "198.18.0.2"}]}
    [(variables, iface, address)] = paths.job_bindings(facts, "198.18.0.202")
    assert (iface, address) == ("eth0", "198.18.0.2") and "NCCL_SOCKET_IFNAME" in variables
    assert "GLOO_SOCKET_IFNAME unset" in variables
    assert paths.job_bindings(facts, "198.18.0.2") == []  # what check itself binds


def test_a_plain_jobs_dropped_binding_is_a_warning_naming_the_interface_that_works() -> None:
    job = {"vars": "GLOO_SOCKET_IFNAME unset", "iface": "eth0", "address": "198.18.0.2",
           "rp_filter": 1, "subnets": {SUBNET: {"peer": "198.18.0.1", "inbound":
                                                _lookup(False, error="Invalid argument")}}}
    ok = [["self", "ok", "ok"], ["ok", "self", "ok"], ["ok", "ok", "self"]]
    kernel = {1: {**_paths({"inbound": _lookup(dev="lo"), "reply": _lookup(dev="eth1")}),
                  "iface": "eth1", "jobs": [job]}}
    [cause] = paths.analyze(ok, _got(), LABELS, kernel)[0]
    assert cause.id == "reverse-path-drop" and cause.severity == "warn" and cause.ranks == (1,)
    assert "binds 198.18.0.2 on eth0" in cause.detail and "GLOO_SOCKET_IFNAME=eth1" in cause.fix


def test_a_failed_input_lookup_without_rp_filter_is_not_a_reverse_path_drop() -> None:
    """`ip route get` also answers 'Invalid argument' for a source this host has (every
    simulated rank of benchmarks/scale_sim.py on one namespace): with rp_filter 0 the kernel
    filters nothing, so no reverse-path-drop is named, neither for a plain job's binding (a
    false warning on every healthy simulated cluster) nor for a failing pair."""
    job = {"vars": "NCCL_SOCKET_IFNAME", "iface": "eth0", "address": "198.18.0.2",
           "rp_filter": 0, "subnets": {SUBNET: {"peer": "198.18.0.1", "inbound":
                                                _lookup(False, error="Invalid argument")}}}
    ok = [["self", "ok", "ok"], ["ok", "self", "ok"], ["ok", "ok", "self"]]
    kernel = {1: {**_paths({"inbound": _lookup(dev="lo"), "reply": _lookup(dev="eth1")}),
                  "iface": "eth1", "jobs": [job]}}
    assert paths.analyze(ok, _got(), LABELS, kernel)[0] == []
    entry = {"inbound": _lookup(False, error="Invalid argument"), "reply": _lookup(dev="eth1")}
    causes, _ = paths.analyze(INTO_2, _got(), LABELS, {2: _paths(entry, rp=0)})
    assert all(c.id != "reverse-path-drop" for c in causes), causes


def test_a_peer_address_this_host_has_is_no_path_to_judge() -> None:
    """Ranks of one host (or scale_sim's simulated ranks, every one on one namespace): the
    way back to a peer address this host has is ``dev lo``; that is not a reply by another
    NIC (it named asymmetric-route on many healthy simulated ranks beside a filtered one)."""
    entry = {"inbound": _lookup(dev="lo"), "reply": _lookup(dev="lo")}
    causes, explained = paths.analyze(INTO_2, _got(), LABELS, {2: _paths(entry, rp=1)})
    assert causes == [] and explained == set()
