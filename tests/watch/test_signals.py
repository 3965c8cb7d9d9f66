"""How we know: each verdict lists the signals that agree and what would contradict it, in the
JSON (Diagnosis.signals / contradicts) and in the text and HTML report."""

from __future__ import annotations

import json
from pathlib import Path

from ddpnet.watch.analyze import Options, analyze
from ddpnet.watch.report import render_html, render_text, report_dict
from ddpnet.watch.state import Diagnosis, Snapshot
from tests.watch.test_desync import log, snap, state

FIXTURES = Path(__file__).with_name("fixtures")


def h100() -> Snapshot:
    report = json.loads((FIXTURES / "h100-linkdown-report.json").read_text())
    return Snapshot.from_dict(report["snapshot"])


def test_a_link_down_verdict_lists_heartbeat_probes_flights_and_sequence_numbers() -> None:
    d = analyze(h100(), Options(stale_after=8.0))
    assert d.kind == "network"
    said = "\n".join(d.signals)
    assert "heartbeat: last state from rank 1 13 s ago; the others within 0 s" in said
    assert "probes: 2 of 2 to rank(s) 1 failed (timeout)" in said
    assert "rank(s) 1 inside all_reduce seq 611; rank(s) 0 inside none" in said
    assert "sequence numbers (differ)" in said
    assert d.contradicts == ("a probe from any peer reaching rank(s) 1's ports",
                             "a heartbeat from rank(s) 1 over its side channel")


def test_a_desync_verdict_says_the_step_digests_differ_and_the_sequence_numbers() -> None:
    s = snap(state(0, log(40)), state(1, log(40)), state(2, log(40, skip=10)))
    d = analyze(s)
    assert d.kind == "collective-mismatch"
    assert "step digests: 3 ranks differ from step 10 on, in 30 of 40 common steps" in d.signals
    assert any(line.startswith("sequence numbers (differ)") for line in d.signals), d.signals
    assert "probes: none run" in d.signals[2]
    assert d.contradicts[0].startswith("rank(s) 2's collectives matching the others'")


def test_signals_round_trip_in_json_and_show_in_text_and_html() -> None:
    snapshot = h100()
    d = analyze(snapshot, Options(stale_after=8.0))
    again = Diagnosis.from_dict(json.loads(json.dumps(d.to_dict())))
    assert again == d and isinstance(again.signals, tuple)
    report = report_dict(d, snapshot, "no progress for 10 s")
    assert report["diagnosis"]["signals"] == list(d.signals)
    text = render_text(d, snapshot, "no progress for 10 s")
    assert "  signal: probes: 2 of 2 to rank(s) 1 failed (timeout)" in text
    assert "  would contradict it: a heartbeat from rank(s) 1 over its side channel" in text
    assert "<p>signals that agree:</p><ul><li>heartbeat:" in render_html(d, snapshot)


def test_an_old_diagnosis_without_signals_still_loads() -> None:
    d = Diagnosis.from_dict({"kind": "rank-gone", "summary": "x", "ranks": [1]})
    assert d.signals == () and d.contradicts == ()


def test_a_healthy_job_has_no_signals_listed() -> None:
    d = analyze(snap(state(0, log(5)), state(1, log(5))))
    assert d.kind == "ok" and d.signals == () and d.contradicts == ()
