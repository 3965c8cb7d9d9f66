"""Shared pieces of the property-based (hypothesis) tests: a parser either returns a value
or raises a DdpnetError that the CLI prints as one line with a hint and exit 2."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from ddpnet.errors import DdpnetError
from ddpnet.exitcodes import ExitCode

T = TypeVar("T")

#: modest: the fuzz suites run in ``make test`` on small machines; DDPNET_FUZZ_EXAMPLES=5000
#: fuzzes deeper on demand
FUZZ = settings(max_examples=int(os.environ.get("DDPNET_FUZZ_EXAMPLES", "200")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

#: characters launcher values, hostlists and URLs are made of, plus a few hostile ones
_ALPHABET = "0123456789-+:,.[]()x/^=@_ aAzZ%\t\n\x00\u0661\u00e9"
#: arbitrary short text, biased towards the syntax parsers look for
text = st.one_of(st.text(alphabet=_ALPHABET, max_size=24), st.text(max_size=12))
#: integers as strings, including huge, negative and signed ones
int_text = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.sampled_from(["", " ", "nan", "inf", "-0", "+3", "1e3", "0x10", "1_000", "٣",
                     "9" * 5000, " 4 ", "4\n"]),
)


def clean(call: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
    """``call(...)``'s value, or None after checking its error is a clean user error."""
    try:
        return call(*args, **kwargs)
    except DdpnetError as exc:
        assert_clean(exc)
        return None


def assert_clean(exc: DdpnetError) -> None:
    """What the CLI needs to print it: exit 2, a one-line message and a hint."""
    assert exc.exit_code == ExitCode.USAGE, exc
    assert exc.message.strip(), exc
    assert "\n" not in exc.message, exc.message
    assert exc.hint.strip(), exc
