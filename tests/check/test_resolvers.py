"""slow-resolver across the nodes: named on the node whose lookups are slow, with the
seconds it costs and the hosts lines that fix it; rank 0's peer lookups count too."""

from __future__ import annotations

from ddpnet.check.compare import NodeFacts
from ddpnet.check.resolvers import compare_resolvers, peer_addresses


def _node(rank: int, lookups: list[dict[str, object]], peer: list[dict[str, object]] = ()
          ) -> NodeFacts:  # type: ignore[assignment]
    return NodeFacts(rank, {"hostname": f"n{rank}", "address": f"198.18.0.{rank + 1}",
                            "resolver": {"nameservers": ["198.18.0.253"], "timeout_s": 3.0,
                                         "attempts": 1, "lookups": lookups,
                                         "peer_lookups": list(peer)}})


FAST = [{"kind": "reverse", "query": "198.18.0.1", "seconds": 0.01, "answer": "n0"}]


def test_rank0_whose_peer_lookups_hang_is_named_with_the_cost() -> None:
    dead = [{"kind": "reverse", "query": "198.18.0.2", "seconds": 3.0, "answered": False}]
    (cause,) = compare_resolvers([_node(0, FAST, dead), _node(1, FAST)])
    assert cause.id == "slow-resolver" and cause.severity == "warn"
    assert cause.ranks == (0,) and cause.hosts == ("n0 (198.18.0.1)",)
    assert "does not answer" in cause.detail and "up to 3 s" in cause.detail
    assert "about 3 s each added to init" in cause.detail
    assert "'198.18.0.2 n1'" in cause.fix and "/etc/hosts" in cause.fix
    assert any("198.18.0.253" in e for e in cause.evidence)


def test_nothing_when_lookups_are_fast_and_a_fail_for_a_dead_forward() -> None:
    assert compare_resolvers([_node(0, FAST), _node(1, FAST), NodeFacts(2, {})]) == []
    dead = [{"kind": "forward", "query": "n1", "seconds": 3.0, "answered": False}]
    (cause,) = compare_resolvers([_node(0, FAST), _node(1, dead)])
    assert cause.severity == "fail" and cause.ranks == (1,)


def test_peer_addresses() -> None:
    assert peer_addresses([(0, "a"), (1, "b"), (2, "b"), (3, "")]) == ["b"]
