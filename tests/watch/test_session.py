"""watch.session: the public phase marks."""

from __future__ import annotations


def test_a_long_phase_held_by_with_survives_the_phase_marks_inside_it() -> None:
    from ddpnet.watch.session import phase, recorder

    rec = recorder()
    with phase("warmup"):
        assert rec.long_phase == "warmup"
        since = rec.long_since
        with phase("data"):
            assert (rec.phase, rec.long_phase) == ("data", "warmup")
        phase("forward")  # a plain mark inside keeps it too
        assert (rec.phase, rec.long_phase, rec.long_since) == ("forward", "warmup", since)
        with phase("checkpoint"):
            assert rec.long_phase == "checkpoint"
        assert rec.long_phase == "warmup" and rec.long_since == since
    assert rec.long_phase == ""
    phase("eval")  # a plain mark of a long phase lasts until the next plain mark
    assert rec.long_phase == "eval"
    phase("data")
    assert (rec.phase, rec.long_phase) == ("data", "")
    phase("")
