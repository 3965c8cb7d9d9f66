"""When the watchdog acts, and its settings (pure)."""

from __future__ import annotations

import pytest

from ddpnet.errors import ConfigError
from ddpnet.watch.session import short_error, torch_environ, watch_config
from ddpnet.watch.state import CollectiveRecord, RankState, Snapshot
from ddpnet.watch.watchdog import Settings, Watchdog
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
    from ddpnet.watch.session import derived_port

    wc = watch_config({})
    first = derived_port("10.0.0.1", 29500, wc, {})
    assert derived_port("10.0.0.1", 29500, wc, {"TORCHELASTIC_RESTART_COUNT": "0"}) == first
    assert derived_port("10.0.0.1", 29500, wc, {"TORCHELASTIC_RESTART_COUNT": "1"}) != first
    assert derived_port("10.0.0.1", 29500, watch_config({"DDPNET_WATCH_PORT": "29777"}),
                        {}) == 29777
