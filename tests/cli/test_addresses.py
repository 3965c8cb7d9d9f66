"""Every address form a user can type, in every place that takes one (MASTER_ADDR,
--master-addr, tcp:// URLs, hostfiles, --hosts, --master): a bad one is one line, a hint and
exit 2 from every command, never a traceback; a link-local one without its zone is named
``master-link-local`` by ``check`` on the rank that has it, before anything dials it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import RunCli, assert_user_error

#: address forms that cannot work as written, and a word of each one's error
BAD = [
    ("[fd00::1]", "without brackets"),
    ("[fd00::1]:29500", "holds a port"),
    ("fd00::1:29500", "MASTER_PORT=29500"),
    ("10.0.0.1:29500", "MASTER_PORT=29500"),
    ("10.0.0.256", "not an IPv4 address"),
    ("fd00:::1", "not an IPv6 address"),
    ("fe80::1%eth/0", "not an interface name"),
    ("10.0.0.1%eth0", "only an IPv6"),
    ("node 01", "whitespace"),
    ("-oProxyCommand=x", "is not a host name"),
    ("[fd00::1", "does not close"),
]
_JOB = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "29598"}


@pytest.mark.parametrize(("addr", "words"), BAD, ids=[b[0] for b in BAD])
def test_every_command_refuses_a_bad_master_addr(run_cli: RunCli, addr: str,
                                                 words: str) -> None:
    env = {**_JOB, "MASTER_ADDR": addr}
    for argv in (["env"], ["check", "--timeout", "3", "--join-timeout", "2"],
                 ["exec", "--", "true"]):
        proc = run_cli(*argv, env=env, timeout=60)
        assert_user_error(proc, 2, words)
    for argv in (["doctor", "--master-addr", addr],
                 ["launch", "--nnodes", "2", "--master-addr", addr, "--dry-run", "--",
                  "x.py"]):
        assert_user_error(run_cli(*argv, timeout=60), 2, words)


@pytest.mark.parametrize("url", ["tcp://fd00::1:29500", "tcp://[fd00::1]",
                                 "tcp://[fe80::1%25eth!0]:29500", "tcp://[fd00::1]:0",
                                 "tcp://a b:1"])
def test_bad_tcp_urls(run_cli: RunCli, url: str) -> None:
    assert_user_error(run_cli("env", "--init-method", url), 2)


def test_good_forms_resolve(run_cli: RunCli) -> None:
    for addr in ("fd00::1", "fe80::1%eth0", "node-01.cluster", "10.0.0.1"):
        proc = run_cli("env", "--json", env={**_JOB, "MASTER_ADDR": addr})
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["master_addr"] == addr
    proc = run_cli("env", "--json", "--init-method", "tcp://[fe80::1%25eth0]:29500")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["master_addr"] == "fe80::1%eth0"


@pytest.mark.parametrize("addr", ["fe80::1", "fe80::1%nosuch0"])
def test_check_names_a_link_local_master_on_the_rank_that_has_it(
        run_cli: RunCli, addr: str) -> None:
    proc = run_cli("check", "--json", "--timeout", "3", "--join-timeout", "2",
                   env={**_JOB, "MASTER_ADDR": addr}, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    (cause,) = json.loads(proc.stdout)["causes"]
    assert cause["id"] == "master-link-local" and cause["ranks"] == [1]
    assert cause["evidence"] and "%" in cause["fix"]
    plain = run_cli("check", "--timeout", "3", "--join-timeout", "2",
                    env={**_JOB, "MASTER_ADDR": addr}, timeout=60)
    assert_user_error(plain, 2, "link-local" if addr == "fe80::1" else "no interface nosuch0")


def test_hostfile_forms(run_cli: RunCli, tmp_path: Path) -> None:
    for text, words in (("fe80::1 slots=2\n", "without its zone"),
                        ("[fd00::1\n", "does not close"), ("n1:x\n", "not a number")):
        hf = tmp_path / "hosts"
        hf.write_text(text)
        assert_user_error(run_cli("launch", "--dry-run", "--hostfile", str(hf), "--",
                                  "x.py"), 2, words)
    assert_user_error(run_cli("diagnose", "--master", "fd00::1:29500"), 2)
