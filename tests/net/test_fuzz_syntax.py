"""Property-based: NCCL_SOCKET_IFNAME syntax and init-method URLs parse to a valid value or a
clean error (IfnameSyntaxError / ConfigError exit 2), never another exception."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ddpnet.env.initmethod import parse_init_method
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
