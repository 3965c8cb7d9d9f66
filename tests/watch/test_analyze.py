"""The analysis on recorded snapshots: every kind named with its ranks, hosts and evidence."""

from __future__ import annotations

from ddpnet.watch.analyze import Options, analyze, describe, rank_gone, silent_ranks
from ddpnet.watch.state import PEER_FAILED, CollectiveRecord, RankState, Snapshot, victim

NOW = 1000.0


def rec(seq: int, *, shape: tuple[int, ...] = (110,), ended: float | None = 1.0,
        op: str = "all_reduce", site: str = "") -> CollectiveRecord:
    return CollectiveRecord(seq=seq, op=op, dtype="float32", shape=shape, started=NOW - 30,
                            ended=ended, state="completed" if ended else "started", site=site)


def state(rank: int, *records: CollectiveRecord, phase: str = "backward",
          published: float = NOW - 0.5, step: int = 7) -> RankState:
    done = [r.seq for r in records if r.ended is not None]
    return RankState(rank=rank, world_size=3, host=f"node{rank}", step=step, phase=phase,
                     phase_since=NOW - 42, last_seq=max(done, default=0), recent=records,
                     published=published)


def snap(*states: RankState | None, gone: dict[int, str] | None = None) -> Snapshot:
    return Snapshot(world_size=len(states), taken=NOW,
                    states={i: s for i, s in enumerate(states)}, gone=gone or {})


def test_healthy_group_is_ok() -> None:
    d = analyze(snap(state(0, rec(1)), state(1, rec(1)), state(2, rec(1))))
    assert d.kind == "ok"


def test_killed_rank_is_gone_with_host_and_who_waits() -> None:
    d = analyze(snap(state(0, rec(5), rec(6, ended=None)), state(1, rec(5)),
                     state(2, rec(5), rec(6, ended=None)), gone={1: "process exited"}))
    assert d.kind == "rank-gone" and d.ranks == (1,) and d.hosts == ("node1",)
    assert "rank 1 (node1) is gone: process exited" in d.summary
    assert any("rank 0 (node0) waits in all_reduce float32[110] seq 6" in e for e in d.evidence)


def test_stopped_rank_with_stale_heartbeat_is_gone() -> None:
    d = analyze(snap(state(0, rec(6, ended=None)), state(1, rec(5), published=NOW - 40),
                     state(2, rec(6, ended=None))))
    assert d.kind == "rank-gone" and d.ranks == (1,)
    assert "no heartbeat for 40 s" in d.summary


def test_ranks_stopped_by_a_peers_failure_come_after_the_rank_that_failed() -> None:
    # rank 0's "Connection closed by peer" reached the hub before rank 1's socket closed
    closed = PEER_FAILED + "DistBackendError: Connection closed by peer [10.0.0.2]:4242"
    assert victim(closed) and not victim("exited with an error: ValueError: x")
    d = analyze(snap(state(0, rec(5)), state(1, rec(5)), state(2, rec(5), rec(6, ended=None)),
                     gone={0: closed, 1: "its process exited or was killed"}))
    assert d.kind == "rank-gone" and d.ranks == (1, 0), d
    assert d.summary.startswith("rank 1 (node1) is gone: its process exited")
    # a stopped rank (stale heartbeat) is named before the rank its silence broke
    d = analyze(snap(state(0, rec(5)), state(1, rec(5), published=NOW - 40),
                     state(2, rec(6, ended=None)), gone={0: closed}))
    assert d.ranks[0] == 1 and "no heartbeat for 40 s" in d.summary
    # with nobody else to blame, the victim is still named (never an empty verdict)
    d = analyze(snap(state(0, rec(5)), state(1, rec(5)), state(2, rec(5)), gone={0: closed}))
    assert d.ranks == (0,) and "stopped by a peer's failure" in d.summary


def test_stale_is_not_gone_in_dump_files() -> None:
    s = snap(state(0, rec(6, ended=None)), state(1, rec(5), published=NOW - 40))
    assert silent_ranks(s, Options(live=False)) == {}


def test_shape_mismatch_names_ranks_seq_and_sites() -> None:
    d = analyze(snap(state(0, rec(9, shape=(3,), ended=None, site="t.py:5 in f")),
                     state(1, rec(9, shape=(4,), ended=None, site="t.py:7 in f")),
                     state(2, rec(9, shape=(3,), ended=None, site="t.py:5 in f"))))
    assert d.kind == "collective-mismatch" and d.ranks == (0, 1, 2)
    # the one rank apart is named with its host (a watch table once cut long host names)
    assert "seq 9" in d.summary and "rank 1 (node1) called all_reduce float32[4]" in d.summary
    assert any("t.py:5" in e for e in d.evidence) and any("t.py:7" in e for e in d.evidence)


def test_an_even_split_waits_live_for_the_rank_still_coming_then_names_the_one_apart() -> None:
    # rank 2 skipped a metric all_reduce; rank 1, late on a loaded host, has not announced
    # seq 9 yet: 1 against 1, either could be the one apart (rank 0 was named)
    metric, bucket = rec(9, shape=(1,), ended=None), rec(9, shape=(577,), ended=None)
    early = snap(state(0, rec(8), metric), state(1, rec(8)), state(2, rec(8), bucket))
    assert analyze(early).kind != "collective-mismatch"
    # a dump file has nothing more to wait for: it says what it holds
    assert analyze(early, Options(live=False)).kind == "collective-mismatch"
    # rank 1 gone: nobody more is coming
    gone = snap(state(0, rec(8), metric), state(1, rec(8)), state(2, rec(8), bucket),
                gone={1: "process exited"})
    assert analyze(gone).kind in ("collective-mismatch", "rank-gone")
    later = snap(state(0, rec(8), metric), state(1, rec(8), metric), state(2, rec(8), bucket))
    d = analyze(later)
    assert d.kind == "collective-mismatch"
    assert "rank 2 (node2) called all_reduce float32[577]" in d.summary, d.summary


def test_an_even_split_nobody_will_settle_names_the_side_that_broke_the_steps_pattern() -> None:
    # each step: a gradient bucket (577) then the metric (1); rank 2 skipped the metric at
    # seq 9 and is in the next bucket; rank 1 died of it before it announced seq 9
    def step_calls(last: int) -> list[CollectiveRecord]:
        return [rec(s, shape=(577,) if s % 2 == 0 else (1,)) for s in range(1, last + 1)]

    metric, bucket = rec(9, shape=(1,), ended=None), rec(9, shape=(577,), ended=None)
    for gone in ({1: "process exited"}, {1: PEER_FAILED + "Connection closed by peer"}):
        d = analyze(snap(state(0, *step_calls(8), metric), state(1, *step_calls(8)),
                         state(2, *step_calls(8), bucket), gone=gone))
        assert d.kind == "collective-mismatch", d
        assert d.summary.startswith("collective mismatch at seq 9: rank 2 (node2) called "
                                    "all_reduce float32[577]"), d.summary
    # with no pattern before it (one call), the split is said as it is, both sides named
    d = analyze(snap(state(0, rec(1), metric), state(2, rec(1), bucket)))
    assert d.kind == "collective-mismatch" and "[577]" in d.summary and "float32[1]" in d.summary


def test_an_even_split_in_a_subgroup_is_named_at_once_its_non_members_are_not_awaited() -> None:
    from dataclasses import replace

    sub = [replace(rec(20, shape=shape, ended=None), group="pair") for shape in ((1,), (2,))]
    d = analyze(snap(state(0, rec(8), sub[0]), state(1, rec(8), sub[1]), state(2, rec(8)),
                     state(3, rec(8))))
    assert d.kind == "collective-mismatch" and "seq 20" in d.summary, d


def test_mismatch_wins_over_the_rank_it_killed() -> None:
    d = analyze(snap(state(0, rec(4), rec(5, shape=(1,), ended=None)),
                     state(1, rec(4), rec(5, ended=None)), gone={0: "process exited"}))
    assert d.kind == "collective-mismatch"


def test_same_shape_different_call_site_is_a_skipped_collective() -> None:
    d = analyze(snap(state(0, rec(5, ended=None, site="a.py:1")),
                     state(1, rec(5, ended=None, site="a.py:9"))))
    assert d.kind == "collective-mismatch"


def test_late_rank_in_data_is_not_arriving_with_phase_and_time() -> None:
    d = analyze(snap(state(0, rec(5), rec(6, ended=None)), state(1, rec(5), phase="data"),
                     state(2, rec(5), rec(6, ended=None))))
    assert d.kind == "rank-not-arriving" and d.ranks == (1,) and d.hosts == ("node1",)
    assert "in 'data' for 42 s" in d.summary and "data loader" in d.hint


def test_everyone_inside_the_same_collective_is_stalled_not_a_rank() -> None:
    d = analyze(snap(state(0, rec(6, ended=None)), state(1, rec(6, ended=None))))
    assert d.kind in ("stalled", "network")
    assert d.kind != "rank-not-arriving"


def test_describe_a_barrier() -> None:
    assert describe(CollectiveRecord(seq=3, op="barrier")) == "barrier seq 3"


def test_a_silent_rank_whose_host_answers_on_no_port_is_a_link_down_not_gone() -> None:
    """The hub's probes of a rank that stopped answering while its connection stays open:
    every connect timing out is its link down (network: the process may be alive); one answer
    (a SIGSTOPped process's kernel still accepts) is a stopped process (rank-gone)."""
    from ddpnet.watch.state import LinkProbe

    flight = (CollectiveRecord(seq=9, op="all_reduce", started=90.0),)
    states = {r: RankState(rank=r, world_size=3, host=f"n{r}", recent=flight,
                           published=100.0 if r != 1 else 80.0, interface="eth0",
                           address=f"198.18.0.{r + 2}") for r in range(3)}
    down = tuple(LinkProbe(src, 1, False, "timeout", port=port, purpose=purpose,
                           outcome="timeout")
                 for src in (0, 2) for port, purpose in ((5, "side"), (6, "sink")))
    assert rank_gone(Snapshot(3, 100.0, states, probes=down)) is None
    found = analyze(Snapshot(3, 100.0, states, probes=down))
    assert found.kind == "network" and found.ranks == (1,) and found.hosts == ("n1",)
    assert found.summary.startswith("link down: rank 1 (n1, eth0 198.18.0.3) sent no "
                                    "heartbeat for 20 s and answers on no port from rank(s) "
                                    "0, 2"), found.summary
    assert "ip -br link show eth0" in found.hint and "ping -c3 198.18.0.3" in found.hint
    closed = analyze(Snapshot(3, 100.0, states, probes=down, gone={1: "connection closed"}))
    assert closed.kind == "rank-gone", "a closed connection is a dead process, not a link"
    answered = (*down[:1], LinkProbe(2, 1, True, "connected", port=5, purpose="side",
                                     outcome="connected"))
    found = analyze(Snapshot(3, 100.0, states, probes=answered))
    assert found.kind == "rank-gone" and "(process stopped or host frozen)" in found.summary
    found = analyze(Snapshot(3, 100.0, states))
    assert found.kind == "rank-gone" and "(process stopped or host frozen)" in found.summary


def test_a_late_rank_cut_off_just_past_the_hubs_stale_after_is_a_link_down() -> None:
    """The race the watch benchmark hit (1 link-down run in 3 named rank-not-arriving): with a
    learned 5 s threshold the hub calls a rank silent after stale_after = 4 s and probes it;
    its last heartbeat, 4.5 s old, was still "fresh" by the network's own 5 s, so the late
    rank was named busy in compute. Silent by the hub's own measure and reached by no peer,
    it is a link down, named by the network detector."""
    from ddpnet.watch.state import LinkProbe

    waiting = (CollectiveRecord(seq=9, op="all_reduce", started=95.0),)
    behind = (CollectiveRecord(seq=8, op="all_reduce", started=94.0, ended=94.1,
                               state="completed"),)
    states = {r: RankState(rank=r, world_size=3, host=f"n{r}", interface="eth0",
                           recent=waiting if r != 2 else behind, last_seq=8,
                           published=100.0 if r != 2 else 95.5,
                           address=f"198.18.0.{r + 2}") for r in range(3)}
    down = tuple(LinkProbe(src, 2, False, "timeout", port=port, purpose=purpose,
                           outcome="timeout", what="connect")
                 for src in (0, 1) for port, purpose in ((5, "side"), (6, "sink")))
    live = Options(stale_after=4.0)
    found = analyze(Snapshot(3, 100.0, states, probes=down), live)
    assert found.kind == "network" and found.ranks == (2,) and found.hosts == ("n2",), found
    # answered by its kernel: not cut off but silent, a stopped process (rank-gone)
    answered = (*down[1:], LinkProbe(0, 2, True, "connected", port=5, purpose="side",
                                     outcome="connected", what="connect"))
    found = analyze(Snapshot(3, 100.0, states, probes=answered), live)
    assert found.kind == "rank-gone" and "(process stopped or host frozen)" in found.summary
    # heard from a second ago and behind: busy in compute (rank-not-arriving)
    busy = {**states, 2: RankState.from_dict({**states[2].to_dict(), "published": 99.0})}
    found = analyze(Snapshot(3, 100.0, busy, probes=down), live)
    assert found.kind == "rank-not-arriving" and found.ranks == (2,), found
