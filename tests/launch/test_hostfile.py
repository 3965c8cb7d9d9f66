"""The hostfile parser: DeepSpeed/Open MPI ``host slots=N``, MPICH ``host:N``, bare hosts,
comments; every bad file is one ConfigError naming file:line."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpnet.errors import ConfigError
from ddpnet.launch.command import Host
from ddpnet.launch.hostfile import MAX_HOSTS, check_master, parse_hostfile, read_hostfile


def test_every_documented_format_and_comments() -> None:
    text = """# the cluster
worker-1 slots=4
worker-2 slots=2 max_slots=8   # Open MPI's max_slots is ignored

node3:8
10.0.0.4
"""
    assert parse_hostfile(text, "hf") == (Host("worker-1", 4), Host("worker-2", 2),
                                          Host("node3", 8), Host("10.0.0.4", 1))


@pytest.mark.parametrize(("text", "where", "words"), [
    ("", "hf", "no hosts"),
    ("# only a comment\n\n", "hf", "no hosts"),
    ("a slots=2\nb\na\n", "hf:3", "listed again (first on line 1)"),
    ("a slots=0\n", "hf:1", "outside 1..1024"),
    ("a slots=x\n", "hf:1", "not a number"),
    ("a slots=-1\n", "hf:1", "not a number"),
    ("a slots=99999999999\n", "hf:1", "not a number"),
    ("a:0\n", "hf:1", "outside"),
    ("a:2 slots=2\n", "hf:1", "mixes"),
    ("a cpus=2\n", "hf:1", "is not slots=N"),
    ("a slots=1 slots=2\n", "hf:1", "twice"),
    ("root@a slots=1\n", "hf:1", "--ssh-user"),
    ("-oProxyCommand=x\n", "hf:1", "not a host line"),
    ("-node\n", "hf:1", "not a host line"),
    ("fe80::1 slots=2\n", "hf:1", "link-local address without its zone"),
    ("[fe80::1]:2\n", "hf:1", "link-local address without its zone"),
    ("fe80::1%eth/0\n", "hf:1", "not an interface name"),
    ("[fd00::1\n", "hf:1", "does not close"),
    ("[fd00::1]x\n", "hf:1", "not :PORT"),
    ("fd00:::1\n", "hf:1", "not an IPv6 address"),
    ("10.0.0.256 slots=1\n", "hf:1", "not an IPv4 address"),
    ("10.0.0.1%eth0\n", "hf:1", "only an IPv6 address takes"),
])
def test_bad_hostfiles_name_file_and_line(text: str, where: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_hostfile(text, "hf")
    assert info.value.message.startswith(where + ":")
    assert words in info.value.message
    assert info.value.hint
    assert "\n" not in info.value.message


def test_every_address_form_a_user_types() -> None:
    text = """fd00::1 slots=4
[fd00::2]:2
[fe80::3%eth0]:8
fe80::4%eth1 slots=1
[fd00::5]
10.0.0.6:3
"""
    assert parse_hostfile(text, "hf") == (
        Host("fd00::1", 4), Host("fd00::2", 2), Host("fe80::3%eth0", 8),
        Host("fe80::4%eth1", 1), Host("fd00::5", 1), Host("10.0.0.6", 3))


def test_master_addr_flag_goes_through_the_one_parser() -> None:
    hosts = (Host("n0", 1), Host("n1", 1))
    assert check_master(hosts, "fe80::1%eth0") == "fe80::1%eth0"
    for bad, words in (("fe80::1", "without its zone"), ("[fd00::1]", "without brackets"),
                       ("n0:29500", "holds a port"), ("n 0", "whitespace")):
        with pytest.raises(ConfigError, match=words):
            check_master(hosts, bad)


def test_too_many_hosts_is_refused() -> None:
    text = "".join(f"h{i}\n" for i in range(MAX_HOSTS + 1))
    with pytest.raises(ConfigError, match="more than"):
        parse_hostfile(text, "hf")


def test_read_hostfile_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="No such file"):
        read_hostfile(str(tmp_path / "absent"))
    good = tmp_path / "hosts"
    good.write_text("a slots=2\n")
    assert read_hostfile(str(good)) == (Host("a", 2),)


def test_a_loopback_master_is_refused_for_several_hosts() -> None:
    two = (Host("localhost", 1), Host("n1", 1))
    for hosts, given in ((two, None), ((Host("127.0.0.1", 1), Host("n1", 1)), None),
                         ((Host("n0", 1), Host("n1", 1)), "127.0.1.1")):
        with pytest.raises(ConfigError, match="loopback"):
            check_master(hosts, given)
    assert check_master((Host("localhost", 4),)) == "localhost"  # one host: fine
    assert check_master(two, "10.0.0.1") == "10.0.0.1"
    assert check_master((Host("n0", 1), Host("n1", 1))) == "n0"
