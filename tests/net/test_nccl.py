"""NCCL_SOCKET_IFNAME syntax: prefixes, ^ exclusion, = exact match, and what is rejected."""

from __future__ import annotations

import pytest

from ddpnet.net.nccl import IfnameSyntaxError, NcclIfname, match, parse_nccl_ifname

NAMES = ("docker0", "eth0", "eth01", "eth1", "ib0", "lo", "veth3a")


@pytest.mark.parametrize(
    ("text", "expected", "matched"),
    [
        ("eth", NcclIfname(False, False, ("eth",)), ("eth0", "eth01", "eth1")),
        ("=eth0", NcclIfname(False, True, ("eth0",)), ("eth0",)),
        ("^docker,lo", NcclIfname(True, False, ("docker", "lo")),
         ("eth0", "eth01", "eth1", "ib0", "veth3a")),
        ("^=docker0,lo", NcclIfname(True, True, ("docker0", "lo")),
         ("eth0", "eth01", "eth1", "ib0", "veth3a")),
        ("ib,eth1", NcclIfname(False, False, ("ib", "eth1")), ("eth1", "ib0")),
        (" =eth0 ", NcclIfname(False, True, ("eth0",)), ("eth0",)),
        ("=eth", NcclIfname(False, True, ("eth",)), ()),
    ],
)
def test_parse_and_match(text: str, expected: NcclIfname, matched: tuple[str, ...]) -> None:
    spec = parse_nccl_ifname(text)
    assert spec == expected
    assert match(spec, NAMES) == matched
    assert parse_nccl_ifname(str(spec)) == spec  # round trip


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "names no interface"),
        ("^", "names no interface"),
        ("^=", "names no interface"),
        ("eth0,,eth1", "empty entry"),
        ("eth0,^lo", "apply to the whole list"),
        ("10.0.0.1", "is an address"),
        ("fd00::1", "is an address"),
        ("eth 0", "not an interface name"),
        ("eth0;rm", "not an interface name"),
    ],
)
def test_rejects(text: str, needle: str) -> None:
    with pytest.raises(IfnameSyntaxError, match=needle):
        parse_nccl_ifname(text)


def test_nccl_settings_as_nccl_reads_them() -> None:
    """The environment wins over the first config file, which wins over /etc/nccl.conf;
    only the network variables are kept."""
    from ddpnet.net.nccl import nccl_conf_paths, nccl_settings, parse_nccl_conf

    assert parse_nccl_conf("# c\nNCCL_NET=IB  # ib\n\nbad line\nNCCL_IB_HCA = mlx5_0\n") == \
        {"NCCL_NET": "IB", "NCCL_IB_HCA": "mlx5_0"}
    user = "NCCL_IB_HCA=mlx5_1\nNCCL_DEBUG=INFO\n"
    system = "NCCL_IB_HCA=mlx5_9\nNCCL_NET=IB\nNCCL_SOCKET_IFNAME=eth0\n"
    env = {"NCCL_SOCKET_IFNAME": "ens5", "NCCL_IB_DISABLE": "1", "PATH": "/bin"}
    assert nccl_settings(env, [user, system]) == {
        "NCCL_IB_DISABLE": "1", "NCCL_IB_HCA": "mlx5_1", "NCCL_NET": "IB",
        "NCCL_SOCKET_IFNAME": "ens5"}
    assert nccl_conf_paths({}, "/home/u") == ("/home/u/.nccl.conf", "/etc/nccl.conf")
    assert nccl_conf_paths({"NCCL_CONF_FILE": "/x.conf"}, "/h")[0] == "/x.conf"


@pytest.mark.parametrize(("text", "cause"), [
    ("ncclInvalidUsage: ... Duplicate GPU detected : rank 1 and rank 0 both on CUDA device "
     "1000", "ranks-share-gpu"),
    ("NCCL WARN Bootstrap : no socket interface found", "interface-mismatch"),
    ("Failed to initialize any NET plugin", "nccl-net-unavailable"),
    ("CUDA driver version is insufficient for CUDA runtime version", "cuda-driver-too-old"),
    ("socketStartConnect: Connect to 10.0.0.2<43211> failed : Connection refused",
     "peer-port-blocked"),
    ("ncclInternalError: some new failure", None),
])
def test_nccl_failure_text_maps_to_a_cause(text: str, cause: str | None) -> None:
    from ddpnet.net.nccl import nccl_failure

    found = nccl_failure(text)
    assert (found.cause if found else None) == cause
    assert found is None or found.fix
