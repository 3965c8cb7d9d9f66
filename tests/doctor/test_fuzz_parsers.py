"""Property-based: doctor's parsers of what a host or user sets (reserved ports, NCCL_IB_HCA)
return a value or a stated problem for any text, never an exception, never a huge set."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ddpnet.doctor.rdma import parse_ib_hca
from ddpnet.doctor.rendezvous import parse_reserved
from tests.fuzzing import FUZZ, text

_ranges = st.lists(st.from_regex(r"-?[0-9]{0,13}(-[0-9]{0,13})?", fullmatch=True),
                   max_size=4).map(",".join)


@FUZZ
@given(st.one_of(text, _ranges))
def test_reserved_ports_parse_to_ports(value: str) -> None:
    ports = parse_reserved(value)
    assert all(0 <= p <= 65535 for p in ports)


def test_a_huge_reserved_range_stops_at_65535() -> None:
    # "0-99999999999" built a set of 10**11 ports (memory exhausted) before the clamp
    assert parse_reserved("29500-99999999999") == set(range(29500, 65536))


@FUZZ
@given(st.one_of(text, st.from_regex(r"\^?=?([a-z0-9_]{0,6}(:[0-9]{0,3})?,?){0,3}",
                                     fullmatch=True)))
def test_ib_hca_parses_or_names_its_problem(value: str) -> None:
    devices, problem = parse_ib_hca(value)
    assert problem is None or (problem and "\n" not in problem)
    assert all(devices) if problem is None else True
