"""Property-based: monitor's interval and duration are finite and bounded, or one clean
ConfigError (exit 2), never another exception."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from ddpnet.monitor.run import MAX_DURATION, MonitorOptions
from tests.fuzzing import FUZZ, clean

_seconds = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(0, 100))


@FUZZ
@given(_seconds, st.one_of(st.none(), _seconds), st.booleans(), st.booleans())
def test_monitor_options_are_bounded_or_refused(interval: float, duration: float | None,
                                                once: bool, as_json: bool) -> None:
    opts = clean(MonitorOptions, interval=interval, duration=duration, once=once,
                 as_json=as_json)
    if opts is not None:
        assert 0 < opts.interval <= 3600
        assert opts.duration is None or 0 <= opts.duration <= MAX_DURATION


def test_an_absurd_duration_is_refused() -> None:
    # ``monitor --duration 1e300`` crashed its timer thread (OverflowError, a traceback) and
    # then sampled forever
    assert clean(MonitorOptions, duration=1e300) is None
    assert clean(MonitorOptions, duration=math.nan) is None
    assert MonitorOptions(duration=MAX_DURATION).duration == MAX_DURATION
