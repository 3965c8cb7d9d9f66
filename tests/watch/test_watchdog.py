"""When the watchdog acts, and its settings (pure)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ddpnet.errors import ConfigError, short_error
from ddpnet.watch import threshold as thresholds
from ddpnet.watch.activity import KEY, Activity
from ddpnet.watch.gaps import KEY as GAPS_KEY
from ddpnet.watch.settings import torch_environ, watch_config
from ddpnet.watch.state import CollectiveRecord, LinkProbe, RankState, Snapshot
from ddpnet.watch.threshold import Threshold, teaches_nothing
from ddpnet.watch.watchdog import (
    OUTAGE_HOLD_S,
    WORKING_MAX_S,
    Settings,
    Watchdog,
    back,
)
from ddpnet.watch.wire import Lines, encode


def snap(seq: int, flying: bool, gone: dict[int, str] | None = None) -> Snapshot:
    rec = CollectiveRecord(seq=seq, op="all_reduce", ended=None if flying else 1.0)
    states = {0: RankState(rank=0, world_size=2, last_seq=seq - 1, recent=(rec,)),
              1: RankState(rank=1, world_size=2, last_seq=seq - 1)}
    return Snapshot(2, 0.0, states, gone or {})


def test_stall_fires_after_the_timeout_only_while_someone_waits() -> None:
    dog = Watchdog(Settings(timeout=5))
    assert dog.due(snap(3, True), 0.0) is None
    assert dog.due(snap(3, True), 4.9) is None
    assert dog.due(snap(3, True), 5.0) == "no progress for 5 s"


def test_progress_rearms_it() -> None:
    dog = Watchdog(Settings(timeout=5))
    dog.due(snap(3, True), 0.0)
    assert dog.due(snap(4, True), 4.0) is None
    assert dog.due(snap(4, True), 8.0) is None
    assert dog.due(snap(4, True), 9.0) is not None


def test_nobody_waiting_is_no_stall() -> None:
    dog = Watchdog(Settings(timeout=5))
    dog.due(snap(3, False), 0.0)
    assert dog.due(snap(3, False), 100.0) is None


def test_a_rank_that_left_fires_after_the_grace() -> None:
    dog = Watchdog(Settings(timeout=60, grace=2))
    assert dog.due(snap(3, False, {1: "killed"}), 10.0) is None
    assert dog.due(snap(3, False, {1: "killed"}), 12.0) == "a rank left"


def test_watch_config_arguments_win_over_the_environment() -> None:
    env = {"DDPNET_WATCH": "0", "DDPNET_WATCH_TIMEOUT": "30", "DDPNET_WATCH_ACTION": "warn"}
    assert not watch_config(env).enabled
    wc = watch_config(env, watch=True, timeout=7, action="exit")
    assert wc.enabled and wc.timeout == 7 and wc.action == "exit"
    assert wc.timeout == 7 and watch_config(env).timeout == 30
    # unset: learned from the job (watch.threshold), no fixed minute
    assert watch_config({}).timeout is None and watch_config({}).enabled
    assert watch_config({"DDPNET_WATCH_TIMEOUT": " "}).timeout is None


@pytest.mark.parametrize("env", [{"DDPNET_WATCH_TIMEOUT": "soon"},
                                 {"DDPNET_WATCH_TIMEOUT": "-1"},
                                 {"DDPNET_WATCH_TIMEOUT": "0"},
                                 {"DDPNET_WATCH_ACTION": "panic"},
                                 {"DDPNET_WATCH_PORT": "99999"}])
def test_bad_watch_settings_are_config_errors(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        watch_config(env)


def test_flight_recorder_is_left_to_a_user_who_sized_it() -> None:
    assert torch_environ({}) == {"TORCH_FR_BUFFER_SIZE": "64"}
    assert torch_environ({"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"}) == {}


def test_short_error_drops_gloos_source_path() -> None:
    text = "[/__w/pytorch/gloo/pair.cc:537] Read error: Connection reset by peer\nmore"
    assert short_error("RuntimeError", text) == \
        "RuntimeError: Read error: Connection reset by peer"


def test_lines_split_and_bound_messages() -> None:
    lines = Lines(limit=64)
    data = encode({"t": "state", "rank": 1})
    assert lines.feed(data[:5]) == []
    assert lines.feed(data[5:] + encode({"t": "bye"})) == [{"t": "state", "rank": 1},
                                                           {"t": "bye"}]
    with pytest.raises(ValueError):
        lines.feed(b"x" * 100)


def test_a_restarted_round_gets_its_own_hub_port() -> None:
    from ddpnet.watch.settings import derived_port

    wc = watch_config({})
    first = derived_port("10.0.0.1", 29500, wc, {})
    assert derived_port("10.0.0.1", 29500, wc, {"TORCHELASTIC_RESTART_COUNT": "0"}) == first
    assert derived_port("10.0.0.1", 29500, wc, {"TORCHELASTIC_RESTART_COUNT": "1"}) != first
    assert derived_port("10.0.0.1", 29500, watch_config({"DDPNET_WATCH_PORT": "29777"}),
                        {}) == 29777


# -- a working rank holds the verdict ---------------------------------------------------------

def learned_dog(timeout: float | None = None) -> Watchdog:
    """A watchdog for :func:`held`'s ranks, which publish a fast loop's gaps (learned: the 5 s
    floor)."""
    return Watchdog(Settings(timeout=timeout))


#: a fast loop's gap summary (``watch.gaps``): the 5 s floor
FAST_GAPS = {GAPS_KEY: {"n": 20, "p99": 0.1, "max": 0.1}}


def held(t: float, moved: float, *, seq: int = 3, published: float | None = None,
         everyone_waits: bool = False, world: int = 2, idle: tuple[int, ...] = ()) -> Snapshot:
    """At ``t``: rank 0 (host h0) has not reached the all_reduce seq ``seq`` the others wait
    in; it last moved at ``moved`` (writing a checkpoint: 100 MB a second); the ranks in
    ``idle`` are behind too and have stood still since 0."""
    flight = CollectiveRecord(seq=seq, op="all_reduce", dtype="float32", shape=(1,), started=0.0)

    def lagging(rank: int, last: float) -> RankState:
        found = Activity(at=t, cpu=1.0, written=int(100e6 * last), share=0.1,
                         stack=("serialization.py:650 in _save",),
                         call="torch/serialization.py:965 in save", user="train.py:88 in main",
                         cpu_at=0.0, io_at=last, stack_at=0.0)
        return RankState(rank=rank, world_size=world, host=f"h{rank}", last_seq=seq - 1,
                         published=t if published is None else published,
                         extra={KEY: found.to_dict(), **FAST_GAPS})

    states: dict[int, RankState | None] = {
        r: RankState(rank=r, world_size=world, host=f"h{r}", last_seq=seq - 1, recent=(flight,),
                     published=t, extra=FAST_GAPS) for r in range(world)}
    if not everyone_waits:
        states[0] = lagging(0, moved)
    for rank in idle:
        states[rank] = lagging(rank, 0.0)
    return Snapshot(world, t, states)


def test_a_working_rank_holds_the_verdict_warns_once_and_is_named_once_it_stops() -> None:
    dog = learned_dog()
    assert dog.due(held(0.0, 0.0), 0.0) is None
    assert dog.due(held(6.0, 6.0), 6.0) is None  # past the 5 s threshold, but it works
    warning = dog.warning
    assert warning is not None and warning.kind == "working" and warning.ranks == (0,)
    assert warning.summary.startswith("rank 0 (h0) keeps 1 rank(s) waiting in all_reduce "
                                      "float32[1] seq 3 for 6 s, working")
    assert "called at train.py:88 in main" in warning.evidence[0]
    assert "wrote 600.0 MB since" in warning.evidence[0]  # since the stall began
    dog.warning = None  # the hub took it
    assert dog.due(held(20.0, 20.0), 20.0) is None and dog.warning is None  # once a stall
    # it stops working at 20: named at the threshold measured from then
    assert dog.due(held(24.0, 20.0), 24.0) is None
    fired = dog.due(held(25.5, 20.0), 25.5)
    assert fired is not None and fired.startswith("no progress for 26 s; rank(s) 0 worked "
                                                  "until ")
    # while it held, the threshold told to every rank said so (their gaps over it teach
    # nothing: watch.gaps); progress again: learned
    dog.fired = False
    assert dog.due(held(20.0, 20.0), 20.0) is None
    assert dog.threshold.source == "working" and dog.threshold.seconds == 5.0, dog.threshold
    assert "rank(s) 0 work while the others wait" in dog.threshold.reason
    dog.due(held(30.0, 30.0, seq=4), 30.0)
    assert dog.threshold.source == "learned", dog.threshold


def test_a_rank_silent_inside_the_collective_behind_a_working_rank_waits_for_it() -> None:
    """A flap of rank 2's node during rank 0's unmarked checkpoint: the stall is the
    checkpoint's (it named rank 0 "not arriving" 19 s in); rank 2 still silent once rank 0
    stopped working is named."""
    dog = learned_dog()
    dog.due(held(0.0, 0.0, world=3), 0.0)
    working = held(6.0, 6.0, world=3)
    silent = replace(working, ages={0: 0.1, 1: 0.1, 2: 6.0})
    assert dog.due(silent, 6.0, silent=(2,)) is None and dog.warning is not None
    stopped = replace(held(12.0, 6.0, world=3), ages={0: 0.1, 1: 0.1, 2: 12.0})
    assert dog.due(stopped, 12.0, silent=(2,)) == "no progress for 12 s; rank(s) 2 silent"
    # silent behind, not inside the collective: not the working rank's stall
    lone = learned_dog()
    lone.due(held(0.0, 0.0, world=3, idle=(2,)), 0.0)
    behind = replace(held(6.0, 6.0, world=3, idle=(2,)), ages={0: 0.1, 1: 0.1, 2: 6.0})
    assert lone.due(behind, 6.0, silent=(2,)) == "no progress for 6 s; rank(s) 2 silent"


def test_a_rank_that_does_not_work_is_named_at_the_threshold() -> None:
    dog = learned_dog()
    dog.due(held(0.0, -1.0), 0.0)
    assert dog.due(held(4.9, -1.0), 4.9) is None
    assert dog.due(held(5.0, -1.0), 5.0) == "no progress for 5 s" and dog.warning is None


def test_a_stopped_rank_no_heartbeat_is_not_working_whatever_it_did_last() -> None:
    dog = learned_dog()
    dog.due(held(0.0, 0.0), 0.0)
    # its last heartbeat (at 1 s) said it worked; nothing since
    assert dog.due(held(6.0, 1.0, published=1.0), 6.0) == "no progress for 6 s"


def test_one_working_rank_does_not_cover_another_that_stands_still() -> None:
    dog = learned_dog()
    dog.due(held(0.0, 0.0, world=3, idle=(1,)), 0.0)
    assert dog.due(held(5.0, 5.0, world=3, idle=(1,)), 5.0) == "no progress for 5 s"


def test_every_rank_inside_the_collective_is_a_stall_as_before() -> None:
    dog = learned_dog()
    dog.due(held(0.0, 0.0, everyone_waits=True), 0.0)
    assert dog.due(held(5.0, 5.0, everyone_waits=True), 5.0) == "no progress for 5 s"


def test_the_users_timeout_is_not_held() -> None:
    dog = learned_dog(timeout=5)
    dog.due(held(0.0, 0.0), 0.0)
    assert dog.due(held(5.0, 5.0), 5.0) == "no progress for 5 s"


def test_a_rank_working_past_the_bound_is_named() -> None:
    dog = learned_dog()
    dog.due(held(0.0, 0.0), 0.0)
    assert dog.due(held(WORKING_MAX_S - 1, WORKING_MAX_S - 1), WORKING_MAX_S - 1) is None
    fired = dog.due(held(WORKING_MAX_S, WORKING_MAX_S), WORKING_MAX_S)
    assert fired is not None and "1800 s" in fired


def test_without_activity_a_laggard_is_named_as_before() -> None:
    from dataclasses import replace

    dog = learned_dog()
    found = snap(3, True)
    found = replace(found, states={r: replace(s, extra=FAST_GAPS)
                                   for r, s in found.states.items() if s is not None})
    assert dog.due(found, 0.0) is None
    assert dog.due(found, 5.0) == "no progress for 5 s"


def test_a_silent_rank_while_others_wait_fires_at_stale_after_in_the_warm_up() -> None:
    """Not the warm-up's 60 s: a rank the hub stopped hearing (frozen, cut off) while the
    others wait is a stall at ``stale_after``."""
    dog = Watchdog(Settings())
    assert dog.threshold.source == "warm-up" and dog.stale_after == 10.0
    assert dog.due(snap(3, True), 0.0, silent=(1,)) is None
    assert dog.due(snap(3, True), 9.9, silent=(1,)) is None
    assert dog.due(snap(3, True), 10.0, silent=(1,)) == "no progress for 10 s; rank(s) 1 silent"
    # nobody waits: no stall, silent or not
    quiet = Watchdog(Settings())
    quiet.due(snap(3, False), 0.0, silent=(1,))
    assert quiet.due(snap(3, False), 30.0, silent=(1,)) is None
    # heard from again: the warm-up's threshold
    again = Watchdog(Settings())
    again.due(snap(3, True), 0.0)
    assert again.due(snap(3, True), 30.0) is None


# -- an outage: held once, while its ranks are back -------------------------------------------

def three_hosts(ages: dict[int, float], probes: tuple[LinkProbe, ...] = (),
                hosts: tuple[str, ...] = ("h0", "h1", "h2")) -> Snapshot:
    """Every rank of a job of len(hosts) waits in all_reduce seq 3; ``ages``: seconds since
    the hub heard each (its clock)."""
    flight = CollectiveRecord(seq=3, op="all_reduce", started=0.0)
    states: dict[int, RankState | None] = {
        r: RankState(rank=r, world_size=len(hosts), host=h, last_seq=2, recent=(flight,))
        for r, h in enumerate(hosts)}
    return Snapshot(len(hosts), 0.0, states, probes=probes, ages=ages)


def reached(*ranks: int, ok: bool = True) -> tuple[LinkProbe, ...]:
    return tuple(LinkProbe(src_rank=0, dst_rank=r, reachable=ok) for r in ranks)


def test_back_means_heard_again_or_answering_a_connect_probe() -> None:
    assert back(three_hosts({0: 0.1, 1: 1.0, 2: 1.0}), (1, 2), late_after=2.5)
    assert not back(three_hosts({0: 0.1, 1: 3.0, 2: 1.0}), (1, 2), 2.5)  # 1 still late
    assert back(three_hosts({0: 0.1, 1: 9.0, 2: 9.0}, reached(1, 2)), (1, 2), 2.5)
    assert not back(three_hosts({0: 0.1, 1: 9.0, 2: 9.0}, reached(1)), (1, 2), 2.5)
    assert not back(three_hosts({0: 0.1, 1: 9.0, 2: 9.0}, reached(1, 2, ok=False)), (1, 2),
                    2.5)


def test_the_hubs_own_flap_is_held_once_then_a_stop_is_named() -> None:
    """The soak's false verdict (issue 56): the hub's node lost its link 4 s, the others'
    heartbeats sat in TCP's backoff and both were named "stopped". Held OUTAGE_HOLD_S once
    while they answer again; a stall that outlives the hold is named."""
    dog = Watchdog(Settings())
    assert dog.due(three_hosts({0: 0.0, 1: 0.0, 2: 0.0}), 0.0) is None
    silent = three_hosts({0: 0.1, 1: 10.0, 2: 10.0})
    assert dog.due(silent, 10.0, silent=(1, 2), late=(1, 2)) is not None
    assert dog.told.source == "unheard" and dog.threshold.source == "warm-up"
    assert dog.outage(three_hosts({0: 0.1, 1: 10.5, 2: 10.5}, reached(1, 2)), 10.5)
    assert "rank(s) 1, 2 went unheard" in dog.outage_note
    assert dog.due(silent, 10.6, silent=(1, 2)) is None
    assert dog.due(silent, 10.5 + OUTAGE_HOLD_S - 0.1, silent=(1, 2)) is None
    assert dog.due(silent, 10.5 + OUTAGE_HOLD_S, silent=(1, 2)) is not None
    assert not dog.outage(three_hosts({0: 0.1, 1: 21.0, 2: 21.0}, reached(1, 2)), 21.0)


def test_a_flap_that_stalled_every_rank_is_held_once_its_rank_is_heard_again() -> None:
    """At the 5 s floor a 4 s flap of node 2 stalls every rank past the threshold, rank 2
    only late (not silent): "stalled, no detector named why" until held."""
    dog = learned_dog()
    dog.due(held(0.0, 0.0, world=3, everyone_waits=True), 0.0)
    late = replace(held(3.0, 0.0, world=3, everyone_waits=True), ages={0: 0.1, 1: 0.1, 2: 3.0})
    assert dog.due(late, 3.0, late=(2,)) is None
    back_again = replace(held(5.0, 0.0, world=3, everyone_waits=True),
                         ages={0: 0.1, 1: 0.1, 2: 0.5})
    assert dog.due(back_again, 5.0) == "no progress for 5 s"
    assert dog.outage(back_again, 5.0) and dog.due(back_again, 6.0) is None
    # without a late rank in the stall, a hang is named at the threshold, no hold
    plain = learned_dog()
    plain.due(held(0.0, 0.0, world=3, everyone_waits=True), 0.0)
    hung = held(5.0, 0.0, world=3, everyone_waits=True)
    assert plain.due(hung, 5.0) == "no progress for 5 s" and not plain.outage(hung, 5.0)
    # the user's watch_timeout is not held
    told = Watchdog(Settings(timeout=5))
    told.due(held(0.0, 0.0, world=3, everyone_waits=True), 0.0)
    told.due(late, 3.0, late=(2,))
    assert told.due(back_again, 5.0) == "no progress for 5 s" and not told.outage(back_again, 5)


def test_progress_after_the_flap_ends_the_hold_and_a_later_stall_may_hold_again() -> None:
    dog = Watchdog(Settings())
    dog.due(three_hosts({0: 0.0, 1: 0.0, 2: 0.0}), 0.0)
    dog.due(three_hosts({0: 0.1, 1: 10.0, 2: 10.0}), 10.0, silent=(1, 2))
    assert dog.outage(three_hosts({0: 0.1, 1: 0.5, 2: 0.5}), 10.5)
    found = three_hosts({0: 0.1, 1: 0.1, 2: 0.1})
    moved = replace(found, states={**found.states, 0: RankState(rank=0, world_size=3,
                                                               host="h0", last_seq=3)})
    assert dog.due(moved, 12.0) is None
    assert dog.quiet_until is None and not dog.late and not dog.outage_note


def test_a_link_still_down_is_not_held() -> None:
    dog = Watchdog(Settings())
    dog.due(three_hosts({0: 0.0, 1: 0.0, 2: 0.0}), 0.0)
    dog.due(three_hosts({0: 0.1, 1: 0.1, 2: 10.0}), 10.0, silent=(2,))
    # the probes' connects time out: the link is down (a cut, not a flap): named at once
    assert not dog.outage(three_hosts({0: 0.1, 1: 0.1, 2: 12.0}, reached(2, ok=False)), 12)
    # a stopped process answers connects: held once, then named
    assert dog.outage(three_hosts({0: 0.1, 1: 0.1, 2: 12.0}, reached(2)), 12.0)


def test_a_gap_teaches_nothing_while_ranks_or_the_hub_are_unheard() -> None:
    learned = Threshold(5.0, "learned", "floor")
    assert not teaches_nothing(learned, 1.0)
    assert teaches_nothing(thresholds.unheard(learned, (1, 2)), 0.0)
    assert teaches_nothing(learned, 4.5)  # no ack for stale_after (4 s at a 5 s threshold)
    assert teaches_nothing(Threshold(120.0, "phase", "eval"), 0.0)


def test_a_late_rank_makes_the_stalls_gaps_teach_nothing_until_progress() -> None:
    """Late (a few heartbeats unheard: a flap's first seconds) is enough, and it lasts while
    the stall does: heard again before the collective resumed, the gap is still the flap's."""
    dog = Watchdog(Settings())
    assert dog.late_after == 2.5
    dog.due(three_hosts({0: 0.0, 1: 0.0, 2: 0.0}), 0.0)
    assert dog.told.source == "warm-up"
    dog.due(three_hosts({0: 0.1, 1: 3.0, 2: 0.1}), 3.0, late=(1,))
    assert dog.told.source == "unheard" and "rank(s) 1 unheard" in dog.told.reason
    dog.due(three_hosts({0: 0.1, 1: 0.1, 2: 0.1}), 5.0)  # heard again, no progress yet
    assert dog.told.source == "unheard"
    found = three_hosts({0: 0.1, 1: 0.1, 2: 0.1})
    moved = replace(found, states={**found.states, 0: RankState(rank=0, world_size=3,
                                                               host="h0", last_seq=3)})
    dog.due(moved, 6.0)
    assert dog.told.source == "warm-up"
