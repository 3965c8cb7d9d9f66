"""What gloo, NCCL and TensorPipe bind, read as each library reads its variable."""

from __future__ import annotations

from pathlib import Path

from ddpnet.net.interfaces import Address, Interface, kernel_order
from ddpnet.net.picks import GLOO, NCCL, TP, library_picks, named_picks, nccl_pick


def _i(name: str, *cidrs: str, up: bool = True, kind: str = "physical") -> Interface:
    addrs = []
    for c in cidrs:
        ip, prefix = c.split("/")
        addrs.append(Address(ip, int(prefix), 6 if ":" in ip else 4))
    return Interface(name, up, tuple(addrs), 1500, None, kind)


LO = _i("lo", "127.0.0.1/8", "::1/128", kind="loopback")
ETH0 = _i("eth0", "10.0.0.5/24")
ETH1 = _i("eth1", "192.168.1.5/24", "fd00::5/64")
DOCKER = _i("docker0", "172.17.0.1/16", kind="docker")
TABLE = (DOCKER, ETH0, ETH1, LO)  # sorted by name, as list_interfaces gives them


def test_nccl_takes_the_first_match_in_kernel_order_not_by_name() -> None:
    # eth1 came up before eth0 on this host: NCCL's "eth" prefix picks it
    pick = nccl_pick("eth", TABLE, ("lo", "eth1", "eth0", "docker0"))
    assert (pick.iface, pick.address, pick.subnet) == ("eth1", "192.168.1.5",
                                                      "192.168.1.0/24")
    assert "kernel interface order: lo, eth1, eth0" in pick.why
    assert nccl_pick("eth", TABLE, ("lo", "eth0", "eth1")).iface == "eth0"


def test_an_exclusion_that_leaves_loopback_first_binds_loopback() -> None:
    # NCCL skips IPv6 loopback only: ^docker0 leaves 127.0.0.1, listed first
    pick = nccl_pick("^docker0", TABLE, ("lo", "eth0", "eth1", "docker0"))
    assert (pick.iface, pick.address) == ("lo", "127.0.0.1")
    assert nccl_pick("^docker0,lo", TABLE, ("lo", "eth0", "eth1", "docker0")).iface == "eth0"


def test_ipv4_addresses_come_before_ipv6_and_down_interfaces_are_skipped() -> None:
    v6_first = (_i("a0", "fd00::1/64"), _i("b0", "10.1.0.1/24"))
    assert nccl_pick("=a0,b0", v6_first, ("a0", "b0")).iface == "b0"
    down = (_i("eth0", "10.0.0.5/24", up=False), ETH1)
    assert nccl_pick("eth", down, ("eth0", "eth1")).iface == "eth1"


def test_unset_nccl_is_nccls_own_choice_and_exact_match_is_exact() -> None:
    auto = nccl_pick(None, TABLE, ("lo", "docker0", "eth0", "eth1"))
    assert auto.value is None and auto.iface == "eth0" and "own choice" in auto.why
    assert nccl_pick("x", TABLE, ("eth0",)).value is None  # 0-1 characters: ignored by NCCL
    assert nccl_pick("=eth", TABLE, ("eth0",)).iface is None
    assert nccl_pick("^^x", TABLE, ("eth0",)).iface is None


def test_gloo_devices_take_each_interfaces_first_ipv4_address() -> None:
    picks = named_picks(GLOO, "eth1, eth0", TABLE)
    assert [(p.slot, p.iface, p.address) for p in picks] == [
        (0, "eth1", "192.168.1.5"), (1, "eth0", "10.0.0.5")]
    missing = named_picks(TP, "ens9", TABLE)[0]
    assert missing.iface is None and "no interface ens9" in missing.why


def test_library_picks_reads_only_what_the_user_set_plus_nccls_own() -> None:
    picks = library_picks({GLOO: "eth0", TP: "", NCCL: ""}, TABLE, ("lo", "eth0"))
    assert [(p.var, p.value) for p in picks] == [(GLOO, "eth0"), (NCCL, None)]
    assert library_picks({GLOO: "e"}, TABLE, ())[0].var == NCCL  # torch ignores 1 character


def test_kernel_order_is_by_ifindex(tmp_path: Path) -> None:
    for name, index in (("eth0", 3), ("eth1", 2), ("lo", 1), ("odd", None)):
        (tmp_path / name).mkdir()
        if index is not None:
            (tmp_path / name / "ifindex").write_text(f"{index}\n")
    assert kernel_order(tmp_path) == ("lo", "eth1", "eth0", "odd")
    assert kernel_order(tmp_path / "none") == ()
