"""A registry served over real HTTP on a socket bound first (net.exposition)."""

from __future__ import annotations

import gzip
import urllib.request
from dataclasses import replace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter

from ddpnet.errors import ConfigError
from ddpnet.exitcodes import ExitCode
from ddpnet.net.exposition import Render, Server, bind, seen_by_scrape, still_fresh


def test_a_bound_socket_serves_the_registry_and_notes_each_scrape() -> None:
    registry = CollectorRegistry()
    Counter("ddpnet_test_things", "things", registry=registry).inc(3)
    server = Server(bind("127.0.0.1", 0, "--metrics-port"), registry)
    try:
        assert server.scraped == float("-inf")
        url = f"http://127.0.0.1:{server.port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:
            text = answer.read().decode()
            assert answer.headers["Content-Type"].startswith("text/plain")
        assert "ddpnet_test_things_total 3.0" in text
        assert server.scraped > float("-inf")
    finally:
        server.close()


def test_a_port_in_use_is_one_line_a_hint_and_exit_2() -> None:
    held = bind("127.0.0.1", 0, "--metrics-port")
    port = held.getsockname()[1]
    try:
        with pytest.raises(ConfigError) as caught:
            bind("127.0.0.1", port, "--metrics-port")
    finally:
        held.close()
    error = caught.value
    assert error.exit_code == ExitCode.USAGE
    assert f"--metrics-port {port}: 127.0.0.1:{port} is already in use" in error.message
    assert "\n" not in error.message and "ss -ltnp" in error.hint


def test_an_event_waits_for_a_scrape_only_while_one_can_come() -> None:
    every_15s = [0.0, 15.0, 30.0]
    assert seen_by_scrape(every_15s, 30.0, 20.0, 21.0, 60.0)  # the scrape at 30 rendered it
    assert not seen_by_scrape(every_15s, 15.0, 20.0, 31.0, 60.0)  # that at 30 got 15's render
    assert not seen_by_scrape(every_15s, 30.0, 31.0, 45.0, 60.0)  # the next is due at 45
    assert not seen_by_scrape(every_15s, 30.0, 31.0, 60.0, 60.0)  # late by a jitter
    assert seen_by_scrape(every_15s, 30.0, 31.0, 62.0, 60.0)  # two intervals missed: it stopped
    assert seen_by_scrape([], float("-inf"), 31.0, 31.0, 60.0)  # nothing scrapes
    assert not seen_by_scrape([30.0], 30.0, 31.0, 90.0, 60.0)  # one scrape: its pace unknown
    assert seen_by_scrape([30.0], 30.0, 31.0, 91.0, 60.0)  # but bounded
    assert seen_by_scrape([0.0, 300.0], 300.0, 301.0, 301.0, 0.0)  # a bound of 0: at once


def test_a_render_answers_again_only_within_ten_times_its_cost_and_its_generation() -> None:
    render = Render(as_of=100.0, took=0.3, generation=(1, True), body=b"")
    assert still_fresh(render, (1, True), 102.9)
    assert not still_fresh(render, (1, True), 103.1)  # older than 10 x 0.3 s
    assert not still_fresh(render, (2, True), 100.1)  # a verdict since: render it
    assert not still_fresh(None, None, 100.0)


def test_scrapes_within_a_renders_window_share_it_until_the_generation_changes() -> None:
    calls, generation = [0], [0]

    class Counting:
        def collect(self) -> Any:
            from prometheus_client.core import GaugeMetricFamily

            calls[0] += 1
            yield GaugeMetricFamily("ddpnet_test_renders", "renders", value=calls[0])

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Counting())
    server = Server(bind("127.0.0.1", 0, "--metrics-port"), registry, lambda: generation[0])
    url = f"http://127.0.0.1:{server.port}/metrics"
    try:
        for expected in (1, 1):  # the second within the first's window (as if it cost 1,000 s)
            with urllib.request.urlopen(url, timeout=10) as answer:
                assert f"ddpnet_test_renders {expected}.0" in answer.read().decode()
            assert calls[0] == 1
            [(key, render)] = server.renders.items()
            server.renders[key] = replace(render, took=1000.0)
        generation[0] = 1  # a verdict: the next scrape renders it
        with urllib.request.urlopen(url, timeout=10) as answer:
            assert "ddpnet_test_renders 2.0" in answer.read().decode()
        request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(request, timeout=10) as answer:  # a format of its own
            assert answer.headers["Content-Encoding"] == "gzip"
            assert b"ddpnet_test_renders 3.0" in gzip.decompress(answer.read())
        assert calls[0] == 3 and server.rendered > float("-inf")
    finally:
        server.close()


def test_a_scraper_hanging_up_mid_answer_prints_no_traceback(
        capsys: pytest.CaptureFixture[str]) -> None:
    server = Server(bind("127.0.0.1", 0, "--metrics-port"), CollectorRegistry())
    try:
        for error in (BrokenPipeError(32, "Broken pipe"), ValueError("a bug")):
            try:
                raise error
            except Exception:
                server.server.handle_error(None, ("127.0.0.1", 1))
    finally:
        server.close()
    err = capsys.readouterr().err
    assert "ValueError: a bug" in err and "BrokenPipeError" not in err
