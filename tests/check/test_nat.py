"""Advertised is not reachable: ranks that reached the store through a translation (pure)."""

from __future__ import annotations

from typing import Any

from ddpnet.check.nat import compare_translated, translated


def _got(via: str) -> dict[int, dict[str, Any]]:
    def node(r: int, master: str) -> dict[str, Any]:
        return {"address": f"10.0.0.{r + 1}", "mesh_port": 4000 + r,
                "names": {"master": {"name": master, "addresses": [master]}}}
    return {0: {**node(0, "10.0.0.1"), "own_addresses": ["10.0.0.1", "172.17.0.1"]},
            1: node(1, "10.0.0.1"), 2: node(2, via)}


LABELS = ["n0 (10.0.0.1)", "n1 (10.0.0.2)", "n2 (10.0.0.3)"]


def test_a_rank_behind_a_vip_that_peers_cannot_reach_is_named() -> None:
    got = _got("10.96.0.10")
    assert translated(got) == {2: "10.96.0.10"}
    matrix = [["self", "ok", "filtered"], ["ok", "self", "filtered"], ["ok", "ok", "self"]]
    [cause] = compare_translated(matrix, got, LABELS)
    assert cause.id == "advertised-unreachable" and cause.ranks == (2,)
    assert "rank 2 on n2 (10.0.0.3) reached the store at 10.96.0.10 (not an address of rank " \
        "0, which is 10.0.0.1) and advertises 10.0.0.3:4002, which rank(s) 0 (filtered), " \
        "1 (filtered) cannot reach" in cause.detail
    assert "hostNetwork" in cause.fix


def test_a_translated_rank_that_everyone_reaches_names_nothing() -> None:
    ok = [["self", "ok", "ok"], ["ok", "self", "ok"], ["ok", "ok", "self"]]
    assert compare_translated(ok, _got("10.96.0.10"), LABELS) == []


def test_direct_ranks_are_not_translated() -> None:
    assert translated(_got("10.0.0.1")) == {} and translated({}) == {}
    # rank 0's other address (its docker0) is still rank 0
    assert translated(_got("172.17.0.1")) == {}
