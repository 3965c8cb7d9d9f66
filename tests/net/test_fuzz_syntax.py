"""Property-based: NCCL_SOCKET_IFNAME syntax and init-method URLs parse to a valid value or a
clean error (IfnameSyntaxError / ConfigError exit 2), never another exception."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ddpnet.env.initmethod import parse_init_method
from ddpnet.net.firewall import parse_iptables_save, parse_nft
from ddpnet.net.nccl import IfnameSyntaxError, match, parse_nccl_ifname
from tests.fuzzing import FUZZ, clean, text

_ifname = st.one_of(text, st.from_regex(r"\^?=?([a-z0-9.:@]{0,5},?){0,3}", fullmatch=True))
_url = st.one_of(
    text,
    st.from_regex(r"(tcp|file|env|http)://(\[[0-9a-f:]{0,8}\]|[a-z0-9.]{0,6})(:-?[0-9]{0,7})?"
                  r"(/[a-z/]{0,5})?(\?[a-z=]{0,3})?", fullmatch=True),
)


@FUZZ
@given(_ifname, st.lists(st.sampled_from(["eth0", "lo", "docker0", "ib0", "eth1"]), max_size=4))
def test_nccl_ifname_parses_or_fails_cleanly(value: str, names: list[str]) -> None:
    try:
        spec = parse_nccl_ifname(value)
    except IfnameSyntaxError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert spec.names and all(spec.names)
    assert parse_nccl_ifname(str(spec)) == spec  # what we print parses back the same
    assert set(match(spec, names)) <= set(names)


@FUZZ
@given(_url)
def test_init_method_parses_or_fails_cleanly(url: str) -> None:
    init = clean(parse_init_method, url)
    if init is None:
        return
    assert init.scheme in ("env", "tcp", "file")
    if init.scheme == "tcp":
        assert init.host and init.port is not None and 1 <= init.port <= 65535
    assert clean(parse_init_method, init.url) == init  # the URL we print parses back the same


_dump_lines = st.lists(st.one_of(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789 :-*#\"'", max_size=30),
    st.sampled_from(["*filter", ":INPUT DROP [0:0]", ":", "-P INPUT ACCEPT", "-P",
                     "-A INPUT -p tcp --dport 29500 -j ACCEPT", "-A INPUT", "COMMIT", "*nat"])),
    max_size=8).map("\n".join)
_json = st.recursive(st.one_of(st.none(), st.integers(), st.text(max_size=5)),
                     lambda kids: st.one_of(st.lists(kids, max_size=3),
                                            st.dictionaries(st.sampled_from(
                                                ["nftables", "chain", "rule", "family", "table",
                                                 "name", "hook"]), kids, max_size=3)),
                     max_leaves=10)


@FUZZ
@given(_dump_lines)
def test_iptables_save_parses_any_dump(text: str) -> None:
    rules = parse_iptables_save(text)
    assert rules is None or all(rules.policies)


@FUZZ
@given(st.one_of(_json.map(json.dumps), st.text(max_size=20)))
def test_nft_dump_parses_or_raises_what_callers_catch(text: str) -> None:
    with contextlib.suppress(ValueError, KeyError):  # documented; its callers catch these
        parse_nft(text)


def test_broken_dumps_found_by_the_fuzzer() -> None:
    # ":" alone made iptables-save parsing raise ValueError (unpack); a JSON list or a string
    # item made parse_nft raise AttributeError/TypeError, which no caller catches
    assert parse_iptables_save("*filter\n:\nCOMMIT") is not None
    for dump in ("[]", '{"nftables": ["chain"]}', '{"nftables": 5}',
                 '{"nftables": [{"chain": {"family": [], "table": "t", "name": "c"}}]}'):
        with pytest.raises(ValueError):
            parse_nft(dump)
