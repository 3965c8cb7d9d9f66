"""The cause model: every cause check makes says what it rests on (issue 29)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ddpnet.check.causes import Cause, join_cause

CHECK = Path(__file__).resolve().parents[2] / "src" / "ddpnet" / "check"


def test_every_cause_is_made_with_its_evidence() -> None:
    bare = []
    for path in sorted(CHECK.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "Cause"
                    and not any(k.arg == "evidence" for k in node.keywords)):
                bare.append(f"{path.relative_to(CHECK)}:{node.lineno}")
    assert not bare, f"causes made without evidence: {bare}"


def test_evidence_is_deduplicated_and_shown_with_its_labels() -> None:
    cause = Cause("mtu-mismatch", "d", "f", evidence=("a", "a", "b"), ruled_out=("x",),
                  confidence="low", see_for_yourself="ip -br link")
    assert cause.evidence == ("a", "b")
    assert cause.shown_evidence() == (("evidence", "a"), ("evidence", "b"), ("ruled out", "x"),
                                      ("confidence", "low"), ("see it yourself", "ip -br link"))
    # nothing observed: no bare confidence line
    assert Cause("mtu-mismatch", "d", "f").shown_evidence() == ()
    with pytest.raises(ValueError, match="confidence"):
        Cause("mtu-mismatch", "d", "f", confidence="sure")


def test_a_rank_that_cannot_join_has_the_same_fields() -> None:
    cause = join_cause("master-unresolvable", "n0 does not resolve", "use an IP", "n1", 1,
                       "Name or service not known")
    assert cause.evidence == ("rank 1 on n1: Name or service not known",)
    assert cause.see_for_yourself == "getent ahosts $MASTER_ADDR"
    assert set(cause.to_dict()) >= {"evidence", "ruled_out", "confidence", "see_for_yourself"}


def test_a_human_report_shows_the_first_observations_and_counts_the_rest() -> None:
    many = Cause("version-mismatch", "d", "f", evidence=tuple(f"rank {r}" for r in range(20)))
    rows = many.shown_evidence(limit=3)
    assert rows[:3] == (("evidence", "rank 0"), ("evidence", "rank 1"), ("evidence", "rank 2"))
    assert rows[3] == ("evidence", "and 17 more (--json lists every one)")
    assert len(many.to_dict()["evidence"]) == 20
