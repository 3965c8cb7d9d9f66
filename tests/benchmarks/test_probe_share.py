"""benchmarks/probe_share.py's pure part: the probe rounds found in a node's byte counters and
the share of the link they make."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("probe_share_script",
                                                  ROOT / "benchmarks/probe_share.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its frozen dataclass looks its module up
    spec.loader.exec_module(mod)
    return mod


def _counters(rates: list[float], every: float = 0.1) -> list[tuple[float, float]]:
    """(time, bytes sent so far) for one interval of each rate."""
    out, sent = [(0.0, 0.0)], 0.0
    for i, rate in enumerate(rates, 1):
        sent += rate * every
        out.append((i * every, sent))
    return out


def test_a_burst_above_the_loops_rate_is_one_round_of_its_bytes_above_that_rate() -> None:
    ps = _module()
    link = 12.5e6  # 100 Mbit/s
    loop = 1e5
    # a loop sending 100 kB/s; two rounds: 0.4 s at the link's rate (one interval of them
    # at a fifth, under the bar, joined), then 0.2 s at 80 %
    rates = [loop] * 30 + [link, link, 0.15 * link, link, link] + [loop] * 60 + \
        [0.8 * link] * 2 + [loop] * 20
    rounds = ps.rounds_in(_counters(rates), link)
    assert len(rounds) == 2
    first, second = rounds
    assert first.seconds == pytest.approx(0.5) and second.seconds == pytest.approx(0.2)
    assert first.bytes == pytest.approx((4.15 * link - 5 * loop) * 0.1)
    assert second.bytes == pytest.approx(2 * (0.8 * link - loop) * 0.1)
    figures = ps.share(rounds, link, 15.0)
    assert figures["rounds"] == 2
    assert figures["share_at_every"] == pytest.approx(
        ((first.bytes + second.bytes) / 2) / (link * 15), rel=1e-3)
    assert figures["share_at_default"] == pytest.approx(figures["share_at_every"] / 20,
                                                        rel=1e-2)


def test_no_burst_no_round_and_rates_parse() -> None:
    ps = _module()
    assert ps.rounds_in(_counters([1e5] * 50), 12.5e6) == []
    assert ps.rounds_in([], 12.5e6) == []
    assert ps.rate_bits("100mbit") == 1e8 and ps.rate_bits("1gbit") == 1e9
    with pytest.raises(ValueError):
        ps.rate_bits("fast")


def test_each_rounds_probe_figures_and_what_the_old_one_round_alert_made_of_them() -> None:
    ps = _module()
    text = ('ddpnet_probe_bandwidth_bytes_per_second{host="a",job_id="j",peer_host="b"} 5e6\n'
            'ddpnet_probe_timestamp_seconds{host="a",job_id="j",peer_host="b"} 100.5\n'
            'ddpnet_probe_rtt_seconds{host="a",job_id="j",peer_host="b"} 0.001\n'
            'ddpnet_probe_timestamp_seconds{host="b",job_id="j",peer_host="a"} 100.5\n')
    assert ps.probe_lines(text) == {"a -> b": (100.5, 5e6)}  # b -> a: no rate, not counted
    slow = ps.slow_alerts({"a -> b": [8e6, 3e6, 9e6, 5e6], "b -> a": [4e6, 4e6]})
    # 3e6 is under half the best so far (8e6): it fires; 5e6 is not under 4.5e6
    assert slow["pair_rounds"] == 6 and slow["would_fire"] == 1
    assert slow["per_pair"]["a -> b"] == {"min": 3e6, "median": 6.5e6, "max": 9e6}
