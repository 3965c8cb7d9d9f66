"""Property-based: ddpnet.init()'s timeouts are positive, finite and bounded, or one clean
ConfigError (exit 2) before anything connects; never an OverflowError from torch."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ddpnet.process_group import MAX_SECONDS, _seconds
from tests.fuzzing import FUZZ, clean, text

_value = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 10**30),
                   text, st.none(), st.sampled_from(["60", "1e300", "nan", "-1", "0"]))


@FUZZ
@given(_value)
def test_seconds_are_bounded_or_refused(value: Any) -> None:
    seconds = clean(_seconds, "timeout", value, "e.g. timeout=60")
    assert seconds is None or 0 < seconds <= MAX_SECONDS


def test_an_absurd_timeout_is_refused_before_torch_sees_it() -> None:
    # ``ddpnet.init(timeout=1e300)`` raised OverflowError ("Python int too large to convert
    # to C int") from torch instead of a ConfigError
    import ddpnet

    for value in (1e300, math.inf, MAX_SECONDS * 2):
        assert clean(ddpnet.init, timeout=value) is None, value
    assert _seconds("timeout", "600", "") == 600.0
