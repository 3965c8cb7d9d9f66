"""Link-local MASTER_ADDR judged against a node's interfaces: the interface it lives on, the
zone to add, a global address to use instead; every rank refuses it before dialing."""

from __future__ import annotations

import pytest

from ddpnet.address import parse_address
from ddpnet.config import DistConfig
from ddpnet.errors import AddressError
from ddpnet.exitcodes import ExitCode
from ddpnet.net.interfaces import Address, Interface
from ddpnet.net.zones import judge_zone, refuse_unusable_zone

LO = Interface("lo", True, (Address("127.0.0.1", 8, 4), Address("::1", 128, 6)), 65536, None,
               "loopback")
ETH0 = Interface("eth0", True, (Address("10.0.0.1", 24, 4), Address("fd00::1", 64, 6),
                                Address("fe80::1", 64, 6)), 1500, 1000, "physical")
ETH1 = Interface("eth1", True, (Address("fe80::99", 64, 6),), 1500, 1000, "physical")


def test_own_address_without_zone_names_its_interface_and_the_global_ones() -> None:
    v = judge_zone(parse_address("fe80::1"), [LO, ETH0, ETH1])
    assert v is not None and v.problem == "no-zone" and v.owner == "eth0"
    assert v.zone == "eth0" and v.globals == ("10.0.0.1", "fd00::1")
    assert "this node's own address on eth0" in v.why() and "EINVAL" in v.why()
    assert "MASTER_ADDR=fe80::1%eth0" in v.fix() and "MASTER_ADDR=10.0.0.1" in v.fix()


def test_peer_address_without_zone_names_the_only_link_or_every_one() -> None:
    one = judge_zone(parse_address("fe80::2"), [LO, ETH0])
    assert one is not None and one.owner == "" and one.zone == "eth0"
    assert "another node's address" in one.why() and "fe80::2%eth0" in one.fix()
    assert "rank 0's global address" in one.fix()
    two = judge_zone(parse_address("fe80::2"), [LO, ETH0, ETH1])
    assert two is not None and two.zone == "" and "eth0, eth1" in two.fix()


def test_zoned_forms() -> None:
    assert judge_zone(parse_address("fe80::2%eth0"), [LO, ETH0]) is None
    assert judge_zone(parse_address("fe80::2%7"), [LO, ETH0]) is None  # an index
    assert judge_zone(parse_address("fd00::1"), [ETH0]) is None
    assert judge_zone(parse_address("node01"), [ETH0]) is None
    unknown = judge_zone(parse_address("fe80::2%ens5"), [LO, ETH0])
    assert unknown is not None and unknown.problem == "unknown-zone"
    assert "no interface ens5" in unknown.why() and "fe80::2%eth0" in unknown.fix()
    wrong = judge_zone(parse_address("fe80::1%eth1"), [LO, ETH0, ETH1])
    assert wrong is not None and wrong.problem == "wrong-zone" and "fe80::1%eth0" in wrong.fix()


def _cfg(addr: str, rank: int = 0) -> DistConfig:
    return DistConfig("manual", rank, 2, 0, 1, rank, 2, addr, 29500, "env://")


@pytest.mark.parametrize("rank", [0, 1])
def test_every_rank_refuses_it_as_bad_input(rank: int) -> None:
    with pytest.raises(AddressError) as info:
        refuse_unusable_zone(_cfg("fe80::1", rank), "n0", [LO, ETH0])
    err = info.value
    assert err.cause == "master-link-local" and err.exit_code == ExitCode.USAGE
    assert err.rank == rank and err.host == "n0" and "\n" not in err.message
    assert err.message.startswith("MASTER_ADDR fe80::1: fe80::1 is an IPv6 link-local")
    assert "export MASTER_ADDR=fe80::1%eth0" in err.hint and "eth0 has it" in err.detail
    refuse_unusable_zone(_cfg("fe80::1%eth0", rank), "n0", [LO, ETH0])  # fine
    refuse_unusable_zone(_cfg("10.0.0.1", rank), "n0", [LO, ETH0])


def test_sockaddr_carries_the_zone_as_the_scope_id() -> None:
    import socket

    from ddpnet.net.ports import sockaddr

    assert sockaddr("fe80::1%1", 5) == (socket.AF_INET6, ("fe80::1", 5, 0, 1))
    assert sockaddr("fe80::1%lo", 5)[1][3] == socket.if_nametoindex("lo")
    assert sockaddr("fd00::1", 5) == (socket.AF_INET6, ("fd00::1", 5))
    assert sockaddr("10.0.0.1", 5) == (socket.AF_INET, ("10.0.0.1", 5))
    with pytest.raises(OSError):
        sockaddr("fe80::1%nosuch0", 5)


def test_init_preflight_refuses_it_before_dialing() -> None:
    from ddpnet.net.probe import preflight

    dialed: list[str] = []
    with pytest.raises(AddressError) as info:
        preflight(_cfg("fe80::1", rank=1), None, 1.0, environ={}, host="n1",
                  connect=lambda addr, port, timeout: dialed.append(addr))
    assert info.value.cause == "master-link-local" and not dialed
