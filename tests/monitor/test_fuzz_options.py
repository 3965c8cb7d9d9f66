"""Property-based: monitor's interval and duration are finite and bounded, or one clean
ConfigError (exit 2), never another exception."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from ddpnet.monitor.run import MAX_DURATION, MonitorOptions
from ddpnet.monitor.sources import parse_netdev
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


@FUZZ
@given(st.lists(st.one_of(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789 :|-", max_size=40),
                          st.just(" eth0: " + " ".join(["7"] * 16))), max_size=6).map("\n".join))
def test_proc_net_dev_parses_any_text(text: str) -> None:
    for counters in parse_netdev(text).values():
        assert counters.rx_bytes >= 0


def test_a_damaged_proc_net_dev_line_is_skipped() -> None:
    # "eth0: x ..." raised ValueError from int() and stopped the monitor
    text = "h1\nh2\n bad: x 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n eth0: " + " ".join(["7"] * 16)
    assert list(parse_netdev(text)) == ["eth0"]
