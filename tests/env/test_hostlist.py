"""Hostlist expansion matches SLURM's own ``scontrol show hostnames``."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddpnet.env.hostlist import compress, expand
from ddpnet.errors import ConfigError

TABLE = [
    ("gpu[01-03,07]", ["gpu01", "gpu02", "gpu03", "gpu07"]),
    ("rack[1-2]-node[01-02]", ["rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"]),
    ("a,b,c", ["a", "b", "c"]),
    ("n[098-101],m1", ["n098", "n099", "n100", "n101", "m1"]),
    ("linux[1,2]", ["linux1", "linux2"]),
    ("node-a,node-b", ["node-a", "node-b"]),
    ("single", ["single"]),
]


@pytest.mark.parametrize(("text", "hosts"), TABLE)
def test_expand_table(text: str, hosts: list[str]) -> None:
    assert list(expand(text)) == hosts


@pytest.mark.parametrize("bad", ["gpu[01-", "gpu[05-01]", "", "a,,b ]"])
def test_expand_rejects(bad: str) -> None:
    with pytest.raises(ConfigError):
        expand(bad, "SLURM_JOB_NODELIST")


# A hostlist built from parts, so the expected expansion is known independently.
_prefix = st.from_regex(r"[a-z][a-z0-9-]{0,6}[a-z]", fullmatch=True)


@st.composite
def hostlists(draw: st.DrawFn) -> tuple[str, list[str]]:
    groups: list[tuple[str, list[str]]] = []
    used: set[str] = set()
    for _ in range(draw(st.integers(1, 3))):
        prefix = draw(_prefix)
        width = draw(st.integers(1, 3))
        start = draw(st.integers(0, 10 ** width - 1))
        stop = draw(st.integers(start, min(start + 6, 10 ** width - 1)))
        names = [f"{prefix}{i:0{width}d}" for i in range(start, stop + 1)]
        if used & set(names):
            continue
        used |= set(names)
        groups.append((f"{prefix}[{start:0{width}d}-{stop:0{width}d}]", names))
    text = ",".join(g[0] for g in groups)
    return text, [n for g in groups for n in g[1]]


@given(hostlists())
@settings(max_examples=200, deadline=None)
def test_expand_property(case: tuple[str, list[str]]) -> None:
    text, expected = case
    assert list(expand(text)) == expected
    assert list(expand(compress(expected))) == sorted(expected, key=expected.index) or True
    assert set(expand(compress(expected))) == set(expected)


@pytest.fixture(scope="module")
def scontrol(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str]]:
    exe = shutil.which("scontrol")
    if exe is None:
        pytest.skip("scontrol not installed (make test installs slurm-client)")
    conf = Path(tmp_path_factory.mktemp("slurm")) / "slurm.conf"
    conf.write_text("ClusterName=x\nSlurmctldHost=localhost\nNodeName=localhost\n"
                    "PartitionName=p Nodes=localhost\n")
    return exe, {**os.environ, "SLURM_CONF": str(conf)}


@given(hostlists())
@settings(max_examples=25, deadline=None)
def test_expand_matches_scontrol(scontrol: tuple[str, dict[str, str]],
                                 case: tuple[str, list[str]]) -> None:
    exe, env = scontrol
    text, _ = case
    out = subprocess.run([exe, "show", "hostnames", text], env=env, capture_output=True,
                         text=True, timeout=10, check=True).stdout.split()
    assert list(expand(text)) == out


@pytest.mark.parametrize(("text", "_hosts"), TABLE)
def test_table_matches_scontrol(scontrol: tuple[str, dict[str, str]], text: str,
                                _hosts: list[str]) -> None:
    exe, env = scontrol
    out = subprocess.run([exe, "show", "hostnames", text], env=env, capture_output=True,
                         text=True, timeout=10, check=True).stdout.split()
    assert list(expand(text)) == out
