"""rendezvous family: config validity, port in use (from /proc/net/tcp), ephemeral range."""

from __future__ import annotations

from pathlib import Path

from ddpnet.doctor import rendezvous
from tests.doctor.helpers import GOOD_SYSCTLS, Tree, inputs

# 29500 = 0x733C, 22 = 0x0016; state 0A = LISTEN, 01 = ESTABLISHED
TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1
   1: 0300A8C6:733C 0100A8C6:D431 01 00000000:00000000 00:00000000 00000000     0        0 2
"""
TCP_LISTEN = TCP + "   2: 00000000:733C 00000000:0000 0A 00000000:00000000 00:00000000 0 0 0 3\n"


def tree_with(tmp_path: Path, tcp: str = TCP, **sysctls: str) -> Tree:
    tree = Tree(tmp_path)
    tree.sysctls(dict(GOOD_SYSCTLS, **sysctls))
    tree.write("proc/net/tcp", tcp)
    return tree


def test_listening_ports_and_reserved_parsing(tmp_path: Path) -> None:
    host = tree_with(tmp_path, TCP_LISTEN).host()
    assert rendezvous.listening_ports(host) == {22, 29500}
    assert rendezvous.parse_reserved("29400,29500-29502, 40000") == {
        29400, 29500, 29501, 29502, 40000}


def test_config_error_fails_with_hint(tmp_path: Path) -> None:
    inp = inputs(config_error=("RANK is set but WORLD_SIZE is not", "export both"))
    r = rendezvous.ConfigValid().run(Tree(tmp_path).host(), inp)
    assert r.status == "fail" and r.fix == "export both"
    assert "WORLD_SIZE" in r.summary


def test_port_in_use_on_master_fails(tmp_path: Path) -> None:
    host = tree_with(tmp_path, TCP_LISTEN).host()
    r = rendezvous.MasterPort().run(host, inputs(master_addr="198.18.0.3", node_rank=0))
    assert r.status == "fail" and "already in use" in r.summary
    assert "ss -ltnp 'sport = :29500'" in r.fix


def test_port_in_use_elsewhere_does_not_matter(tmp_path: Path) -> None:
    host = tree_with(tmp_path, TCP_LISTEN).host()
    r = rendezvous.MasterPort().run(host, inputs())  # master is 198.18.0.1, we are .3
    assert r.status == "pass" and "not the rank-0 host" in r.detail


def test_free_port_passes(tmp_path: Path) -> None:
    r = rendezvous.MasterPort().run(tree_with(tmp_path).host(),
                                    inputs(master_addr="127.0.0.1", num_nodes=1))
    assert r.status == "pass" and r.facts["ephemeral_range"] == [32768, 60999]


def test_port_in_ephemeral_range_warns_unless_reserved(tmp_path: Path) -> None:
    host = tree_with(tmp_path, **{"net.ipv4.ip_local_port_range": "15000 60999"}).host()
    r = rendezvous.MasterPort().run(host, inputs(master_addr="198.18.0.3"))
    assert r.status == "warn" and "ephemeral range 15000-60999" in r.summary
    assert "sysctl -w net.ipv4.ip_local_reserved_ports=29500" in r.fix
    host = tree_with(tmp_path / "b", **{"net.ipv4.ip_local_port_range": "15000 60999",
                                        "net.ipv4.ip_local_reserved_ports": "29400-29500"}).host()
    assert rendezvous.MasterPort().run(host, inputs(master_addr="198.18.0.3")).status == "pass"


def test_c10d_port_only_when_used(tmp_path: Path) -> None:
    host = tree_with(tmp_path, TCP + "   3: 00000000:72D8 00000000:0000 0A 0 0 0 0 0 0 4\n").host()
    assert rendezvous.C10dPort().run(host, inputs()).status == "skip"
    r = rendezvous.C10dPort().run(host, inputs(c10d=True, master_addr="198.18.0.3"))
    assert r.status == "fail" and "29400" in r.summary


def test_a_link_local_master_without_its_zone_fails_with_the_interface(tmp_path: Path) -> None:
    from ddpnet.net.interfaces import Address, Interface

    eth0 = Interface("eth0", True, (Address("198.18.0.1", 24, 4), Address("fe80::1", 64, 6)),
                     1500, None, "virtual")
    r = rendezvous.ConfigValid().run(Tree(tmp_path).host(),
                                     inputs(master_addr="fe80::1", interfaces=(eth0,)))
    assert r.status == "fail" and "(no-zone)" in r.summary
    assert "MASTER_ADDR=fe80::1%eth0" in r.fix and "MASTER_ADDR=198.18.0.1" in r.fix
    assert "eth0 has it" in r.facts["evidence"]
    ok = rendezvous.ConfigValid().run(Tree(tmp_path).host(),
                                      inputs(master_addr="fe80::1%eth0", interfaces=(eth0,)))
    assert ok.status == "pass"


def test_port_held_by_an_outgoing_connection_is_named_not_ss_ltnp(tmp_path: Path) -> None:
    # 198.18.0.1:40000 (0x9C40) -> 198.18.0.2:5201, ESTABLISHED, uid 0: no listener on 40000
    conn = TCP + ("   2: 010012C6:9C40 020012C6:1451 01 00000000:00000000 00:00000000 "
                  "00000000     0        0 4\n")
    host = tree_with(tmp_path, conn).host()
    r = rendezvous.MasterPort().run(host, inputs(master_addr="198.18.0.3", node_rank=0,
                                                 master_port=40000))
    assert r.status == "fail" and "local port of 1 connection(s)" in r.summary
    assert "ESTABLISHED 198.18.0.1:40000 -> 198.18.0.2:5201" in r.detail
    assert "ss -tanp 'sport = :40000'" in r.fix and "ss -ltnp" not in r.fix
