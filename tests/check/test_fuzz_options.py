"""Property-based: check's options are in range and finite, or one clean ConfigError (exit 2);
click's FloatRange lets NaN through, so the options check it themselves."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from ddpnet.check.options import LIMITS, CheckOptions
from tests.fuzzing import FUZZ, clean

_seconds = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(0, 100))


@FUZZ
@given(_seconds, _seconds, _seconds, _seconds)
def test_check_options_are_finite_or_refused(stage: float, join: float, connect: float,
                                             bw: float) -> None:
    opts = clean(CheckOptions, stage_timeout=stage, join_timeout=join, connect_timeout=connect,
                 bw_seconds=bw)
    if opts is not None:
        assert all(math.isfinite(v) for v in (stage, join, connect, bw))
        assert opts.stage_timeout <= LIMITS["stage_timeout"][1]
        assert CheckOptions.from_json(opts.to_json()) == opts


def test_nan_timeouts_are_refused() -> None:
    # ``check --timeout nan`` ran and blamed the master ("cannot convert float NaN to
    # integer" reported as master-no-route); ``--bw-seconds nan`` reported a stage timeout
    assert clean(CheckOptions, stage_timeout=math.nan) is None
    assert clean(CheckOptions, bw_seconds=math.nan) is None
    assert CheckOptions(stage_timeout=20.0).stage_timeout == 20.0
