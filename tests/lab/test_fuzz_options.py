"""Property-based: lab option parsers (rates, delays, losses, node lists, names, subnets,
fault options) give a valid value or one clean ConfigError (exit 2), never another exception."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ddpnet.errors import ConfigError
from ddpnet.lab.faults import KINDS, normalize
from ddpnet.lab.topology import (
    LabSpec,
    check_lab_cidr,
    delay_ms,
    loss_percent,
    parse_nodes,
    plan,
    rate_bits,
    tbf_burst_bytes,
    validate_name,
)
from tests.fuzzing import FUZZ, clean, int_text, text

_number = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10, 10**6),
                    int_text, text)
_rate = st.one_of(st.from_regex(r"[0-9]{1,400}(\.[0-9]{1,3})?(bit|kbit|gbit|tbit|mbps)",
                                fullmatch=True), text)


@FUZZ
@given(_rate)
def test_rate_parses_or_fails_cleanly(rate: str) -> None:
    bits = clean(rate_bits, rate)
    if bits is not None:
        assert 0 < bits < float("inf")
        assert clean(tbf_burst_bytes, rate) is not None


@FUZZ
@given(st.one_of(_number, st.from_regex(r"[0-9]{1,400}(us|ms|s)", fullmatch=True)))
def test_delay_and_loss_parse_or_fail_cleanly(value: Any) -> None:
    ms = clean(delay_ms, value)
    assert ms is None or 0 <= ms < float("inf")
    pct = clean(loss_percent, value)
    assert pct is None or 0 <= pct <= 100


@FUZZ
@given(st.one_of(st.none(), text, st.from_regex(r"[0-9]{1,13}(-[0-9]{1,13})?(,[0-9]{1,3})?",
                                                 fullmatch=True)),
       st.integers(1, 300))
def test_node_list_parses_or_fails_cleanly(nodes: str | None, count: int) -> None:
    chosen = clean(parse_nodes, nodes, count)
    if chosen is not None:
        assert chosen and all(0 <= i < count for i in chosen)


@FUZZ
@given(text, st.one_of(text, st.sampled_from(["198.18.1.10/24", "10.0.0.1/8", "::1/128"])))
def test_name_and_address_parse_or_fail_cleanly(name: str, cidr: str) -> None:
    clean(validate_name, name)
    clean(check_lab_cidr, cidr)


@FUZZ
@given(st.builds(
    LabSpec,
    name=st.one_of(st.just("lab"), text),
    nodes=st.one_of(st.integers(-2, 70000), st.sampled_from([2, 4])),
    subnet=st.one_of(st.sampled_from(["198.18.0.0/24", "198.18.0.0/15", "198.18.0.0/31",
                                      "10.0.0.0/8", "198.18.0.0/33"]), text),
    rate=st.one_of(st.none(), _rate), delay=st.one_of(st.none(), text),
    loss=st.one_of(st.none(), text), mtu=st.integers(-1, 10**6),
    ifname=st.one_of(st.just("eth0"), text),
    second_net=st.one_of(st.none(), st.sampled_from(["198.18.2.0/24", "198.18.0.0/25",
                                                     "198.19.0.0/16", "10.0.0.0/8"]), text),
    second_ifname=st.one_of(st.just("eth1"), text), second_rate=st.one_of(st.none(), _rate),
    second_first=st.one_of(st.just(()), st.tuples(st.integers(-2, 6)),
                           st.tuples(st.one_of(text, st.none()))),
))
def test_lab_spec_plans_or_fails_cleanly(spec: LabSpec) -> None:
    p = clean(plan, spec)
    if p is not None:
        assert len(p.nodes) == spec.nodes
        assert all(bool(n.second_address) == bool(spec.second_net) for n in p.nodes)


_OPTION = st.sampled_from(["port", "reject", "for_s", "rate", "percent", "ms", "mtu", "iface",
                           "address", "for-s"])
#: one or two options at once, so the kind-specific checks are reached (not only "unknown")
_opts = st.lists(st.tuples(_OPTION, st.one_of(_number, _rate, st.booleans())),
                 max_size=2).map(dict)


@FUZZ
@given(st.one_of(st.sampled_from(sorted(KINDS)), text), _opts)
def test_fault_options_normalize_or_fail_cleanly(kind: str, opts: dict[str, Any]) -> None:
    rec = clean(normalize, kind, opts, now=0.0)
    if rec is not None:
        assert rec["kind"] == kind


def test_a_huge_node_range_is_refused_at_once() -> None:
    # ``--nodes 0-99999999999`` used to build the whole range before checking it (hang)
    assert clean(parse_nodes, "0-99999999999", 4) is None
    assert parse_nodes("1-3", 4) == (1, 2, 3)


def test_fault_numbers_that_are_not_numbers_are_config_errors() -> None:
    # found by the fuzzer: ValueError escaped from float()/int() (the Python API takes any value)
    assert clean(normalize, "link-down", {"for_s": "abc"}) is None
    assert clean(normalize, "mtu", {"mtu": "x"}) is None
    assert clean(normalize, "mtu", {"mtu": float("nan")}) is None
    assert normalize("mtu", {"mtu": "9000"}) == {"kind": "mtu", "mtu": 9000}


def test_an_infinite_or_absurd_rate_is_refused() -> None:
    # a 400-digit rate was float inf: accepted, then tbf_burst_bytes raised OverflowError
    assert clean(rate_bits, "9" * 400 + "bit") is None
    assert clean(rate_bits, "2tbit") is None
    assert rate_bits("1tbit") == 1e12


def test_a_lab_has_at_most_max_nodes() -> None:
    # a /15 subnet has room for 131070 nodes: 70000 namespaces used to be accepted
    assert clean(plan, LabSpec(nodes=70000, subnet="198.18.0.0/15")) is None
    assert len(plan(LabSpec(nodes=300, subnet="198.18.0.0/16")).nodes) == 300


def test_a_node_index_of_5000_digits_is_a_config_error() -> None:
    # int() refuses strings of more than 4300 digits with a ValueError, which escaped
    assert clean(parse_nodes, "9" * 5000, 4) is None


def test_lab_run_and_fault_options_are_checked_before_the_lab_is_looked_up() -> None:
    # ``lab run --timeout nan`` passed click's FloatRange; a fault's bad option was only seen
    # once a lab was up (on a lab that is not up, the error named the lab, not the option)
    from ddpnet.lab.ops import FaultOptions, RunOptions, fault

    assert clean(RunOptions, "fzl", ("true",), timeout=float("nan")) is None
    assert clean(RunOptions, "fzl", ("true",), master_port=0) is None
    with pytest.raises(ConfigError, match="bad delay"):
        fault(FaultOptions("fzl-absent", "delay", "0", {"ms": float("nan")}))
