"""The hub and the heartbeat over real loopback sockets (no torch, no process group)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from ddpnet.net.ports import listen_socket
from ddpnet.watch.activity import Activity
from ddpnet.watch.heartbeat import Beacon
from ddpnet.watch.hub import Hub, HubOptions, ask_snapshot, tick_every
from ddpnet.watch.hubstore import Probing
from ddpnet.watch.probe import probe_request
from ddpnet.watch.recorder import Recorder
from ddpnet.watch.state import CollectiveRecord, Diagnosis, RankState
from ddpnet.watch.wire import Lines

TOKEN = "127.0.0.1:1:2"


def start_hub(tmp_path: Path, timeout: float = 30) -> tuple[Hub, int, threading.Thread]:
    sock = listen_socket("127.0.0.1", 0)
    sock.setblocking(False)
    port = sock.getsockname()[1]
    hub = Hub(HubOptions("127.0.0.1", port, 2, timeout, "exit", str(tmp_path), TOKEN), sock)
    thread = threading.Thread(target=hub.serve, daemon=True)
    thread.start()
    return hub, port, thread


def beacon(rank: int, tmp_path: Path, exits: list[tuple[int, int]], *,
           ports: bool = False) -> Beacon:
    """A rank's heartbeat; with ``ports``, on 127.0.0.1 with its probe listeners open."""
    rec = Recorder()
    rec.use_fr = False
    b = Beacon(rec, RankState(rank=rank, world_size=2, host=f"h{rank}",
                              address="127.0.0.1" if ports else ""), tmp_path,
               period=0.2, exit_now=lambda code: exits.append((rank, code)))
    if ports:
        b.open_ports(gloo=False)
    return b


def connected_pair(tmp_path: Path, exits: list[tuple[int, int]], *, ports: bool = False
                   ) -> tuple[Hub, int, threading.Thread, Beacon, Beacon]:
    """A hub and ranks 0 and 1 connected to it, each having sent its state."""
    hub, port, thread = start_hub(tmp_path)
    b0, b1 = beacon(0, tmp_path, exits, ports=ports), beacon(1, tmp_path, exits, ports=ports)
    b0.connect("127.0.0.1", port, token=TOKEN)
    b1.connect("127.0.0.1", port, token=TOKEN)
    assert wait_for(lambda: len(hub.states) == 2)
    return hub, port, thread, b0, b1


def wait_for(predicate: object, seconds: float = 10) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def test_a_rank_that_vanishes_is_named_and_the_others_told_to_exit(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    exits: list[tuple[int, int]] = []
    _hub, port, thread, _b0, b1 = connected_pair(tmp_path, exits)
    snapshot, _stale = ask_snapshot("127.0.0.1", port)
    assert snapshot.states[1] is not None and snapshot.states[1].host == "h1"
    sock = b1.sock
    b1.stopped.set()
    assert sock is not None
    sock.close()  # as a SIGKILL would: no goodbye
    assert wait_for(lambda: exits == [(0, 4)])
    thread.join(10)
    assert not thread.is_alive()  # the hub leaves after its verdict
    err = capsys.readouterr().err
    assert "ddpnet watch: rank-gone" in err and "rank 1 (h1) is gone" in err
    assert (tmp_path / "report.json").exists() and (tmp_path / "rank-0.json").exists()


def test_a_clean_goodbye_is_no_fault_and_the_hub_leaves(tmp_path: Path) -> None:
    hub, port, thread = start_hub(tmp_path)
    exits: list[tuple[int, int]] = []
    beacons = [beacon(r, tmp_path, exits) for r in (0, 1)]
    for b in beacons:
        b.connect("127.0.0.1", port, token=TOKEN)
    for b in beacons:
        b.close()
    thread.join(10)
    assert not thread.is_alive() and exits == [] and hub.finished == {0, 1}


def test_the_hub_leaves_when_every_rank_it_heard_from_said_goodbye(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 1's watch never started (an attached script whose set-up failed there): once
    rank 0 said goodbye the hub does not wait for it forever."""
    from ddpnet.watch import hub as hub_module

    monkeypatch.setattr(hub_module, "AFTER_LAST_BYE_S", 0.5)
    hub, port, thread = start_hub(tmp_path)
    exits: list[tuple[int, int]] = []
    b0 = beacon(0, tmp_path, exits)
    b0.connect("127.0.0.1", port, token=TOKEN)
    assert wait_for(lambda: 0 in hub.states)
    assert thread.is_alive()
    b0.close()
    thread.join(10)
    assert not thread.is_alive() and exits == [] and hub.finished == {0}


def test_a_rank_of_another_job_is_refused(tmp_path: Path) -> None:
    _hub, port, _thread = start_hub(tmp_path)
    with pytest.raises(OSError, match="not this job's hub"):
        beacon(0, tmp_path, []).connect("127.0.0.1", port, token="other:1:2", patience=0)


def test_no_hub_is_an_os_error_quickly(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(OSError):
        beacon(0, tmp_path, []).connect("127.0.0.1", port, token=TOKEN, patience=0.5)
    assert time.monotonic() - start < 5


def stuck_beacon(rank: int, tmp_path: Path, exits: list[tuple[int, int]]) -> Beacon:
    """A rank inside all_reduce #5 that never returns, with its probe listeners open."""
    rec = Recorder()
    rec.use_fr = False
    rec.called.append(CollectiveRecord(seq=5, op="all_reduce", group="default_pg",
                                       started=time.time()))
    b = Beacon(rec, RankState(rank=rank, world_size=2, host=f"h{rank}", address="127.0.0.1"),
               tmp_path, period=0.2, exit_now=lambda code: exits.append((rank, code)))
    ports = b.open_ports(gloo=False)
    assert set(ports) == {"side", "sink"} and b.ident.extra["ports"] == ports
    return b


def test_a_stall_in_one_collective_is_probed_and_the_closed_port_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _hub, port, thread = start_hub(tmp_path, timeout=1.0)
    exits: list[tuple[int, int]] = []
    b0, b1 = stuck_beacon(0, tmp_path, exits), stuck_beacon(1, tmp_path, exits)
    b1.listeners[1].close()  # rank 1's sink stops listening: refused, its side port answers
    for b in (b0, b1):
        b.connect("127.0.0.1", port, token=TOKEN)
    assert wait_for(lambda: len(exits) == 2, 20), capsys.readouterr().err
    thread.join(10)
    report = json.loads((tmp_path / "report.json").read_text())
    probes = report["snapshot"]["probes"]
    assert {p["src_rank"] for p in probes} == {0, 1}  # both ranks answered the request
    assert report["kind"] == "network", report["diagnosis"]
    # two ranks, one failing pair: the link is named (a node needs a third rank to tell)
    summary = report["diagnosis"]["summary"]
    assert summary.startswith("firewall: rank 0 (h0") and "rank 1 (h1" in summary, summary
    assert f"port(s) {b1.ident.extra['ports']['sink']} are refused" in summary
    for b in (b0, b1):
        b.close()


def test_a_probe_round_is_the_watchs_work_not_the_ranks(tmp_path: Path) -> None:
    """Rank 0 answers a probe request (its ``ddpnet-watch-probe`` thread and pool) by
    streaming into rank 1's sink, both in this process: the CPU both ends spend is noted as
    the watch's, so the rank's sampled CPU stands still (issue 39: a straggler round into a
    rank asleep in its data loader held the verdict on a loaded host)."""
    exits: list[tuple[int, int]] = []
    b0, b1 = stuck_beacon(0, tmp_path, exits), stuck_beacon(1, tmp_path, exits)
    samples: list[Activity] = []

    def sample() -> None:
        """One sample of rank 0's activity, taken as its heartbeat thread takes it."""
        take = threading.Thread(target=lambda: samples.append(b0.activity.sample()),
                                name="ddpnet-watch-heartbeat")
        take.start()
        take.join(10)

    sample()
    cpu = time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID)
    b0.handle(probe_request(1, {1: b1.ident}, 0, (0, 1)))
    probing = [t for t in threading.enumerate() if t.name == "ddpnet-watch-probe"]
    for thread in probing:
        thread.join(10)
    time.sleep(0.2)  # rank 1's sink has read the last bytes
    spent = time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID) - cpu
    sample()
    for b in (b0, b1):
        b.close()
    before, after = samples
    assert probing and spent > 0.01, (probing, spent)  # both ends' CPU for the stream
    assert before.cpu is not None and after.cpu is not None
    assert after.cpu - before.cpu < 0.25 * spent, (after.cpu - before.cpu, spent)


def test_probe_request_names_only_the_peers_a_rank_probes() -> None:
    states = {r: RankState(rank=r, world_size=100, address=f"10.0.0.{r}",
                           extra={"ports": {"side": 1000 + r}}) for r in range(100)}
    request = probe_request(7, states, 5, tuple(range(100)))
    assert request["id"] == 7 and request["t"] == "probe"
    assert set(request["peers"]) == {"4", "6"}  # ring neighbours above 64 ranks
    assert request["peers"]["6"] == {"address": "10.0.0.6", "ports": {"side": 1006}}


def test_late_or_foreign_probes_are_ignored(tmp_path: Path) -> None:
    sock = listen_socket("127.0.0.1", 0)
    hub = Hub(HubOptions("127.0.0.1", 0, 2, 30, "exit", str(tmp_path), TOKEN), sock)
    hub.probing = Probing(2, "no progress", time.monotonic() + 5, {0, 1}, [])
    probe = {"src_rank": 1, "dst_rank": 0, "reachable": True}
    hub.add_probes(1, {"id": 1, "probes": [probe]})  # an earlier stall's
    assert hub.probing.waiting == {0, 1} and hub.probing.found == []
    hub.add_probes(1, {"id": 2, "probes": [probe]})
    hub.add_probes(1, {"id": 2, "probes": [probe]})  # twice: counted once
    assert hub.probing.waiting == {0} and len(hub.probing.found) == 1
    sock.close()


def test_a_straggler_is_warned_once_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sock = listen_socket("127.0.0.1", 0)
    hub = Hub(HubOptions("127.0.0.1", 0, 2, 30, "exit", str(tmp_path), TOKEN), sock)
    steps = (0.2,) * 10
    hub.states = {0: RankState(rank=0, world_size=2, step_times=steps, wait_times=(0.15,) * 10),
                  1: RankState(rank=1, world_size=2, host="slow", step_times=steps,
                               wait_times=(0.0,) * 10)}
    hub.check_stragglers(100.0)
    hub.check_stragglers(200.0)  # the same straggler again: no second line
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("ddpnet: watch: warning: straggler: rank 1 (slow")
    saved = json.loads((tmp_path / "warnings.json").read_text())
    assert [w["ranks"] for w in saved] == [[1]]
    sock.close()


def test_a_silent_rank_is_probed_by_connects_only() -> None:
    states = {r: RankState(rank=r, world_size=100, address=f"10.0.0.{r}",
                           extra={"ports": {"side": 1000 + r}}) for r in range(100)}
    request = probe_request(3, states, 50, tuple(range(100)), silent=(7, 50))
    assert set(request["peers"]) == {"7"} and request["stream"] is False
    assert probe_request(3, states, 50, tuple(range(100)))["stream"] is True


def slowed_states(world: int = 3, steps: int = 20) -> dict[int, RankState]:
    """Every rank's collectives 10x slower in the second half of the window, compute even."""
    waits = tuple(0.05 if k < steps // 2 else 0.5 for k in range(steps))
    return {r: RankState(rank=r, world_size=world, host=f"node{r}", address=f"10.0.0.{r}",
                         step_times=tuple(0.2 + w for w in waits), wait_times=waits,
                         extra={"ports": {"sink": 2000 + r}}) for r in range(world)}


def stream(a: int, b: int, rate: float) -> dict[str, object]:
    return {"src_rank": a, "dst_rank": b, "reachable": True, "detail": f"{rate} Gb/s",
            "rate_gbps": rate, "what": "stream", "purpose": "sink", "outcome": "streamed"}


Peered = tuple[Hub, list[tuple[socket.socket, socket.socket]]]


@pytest.fixture
def peered(tmp_path: Path) -> Iterator[Peered]:
    """A hub of 3 ranks, each a socket pair (ours is the hub's side), not serving: tests call
    its checks directly."""
    from ddpnet.watch.hubstore import Peer

    sock = listen_socket("127.0.0.1", 0)
    hub = Hub(HubOptions("127.0.0.1", 0, 3, 30, "exit", str(tmp_path), TOKEN), sock)
    pairs = [socket.socketpair() for _ in range(3)]
    for rank, (ours, _theirs) in enumerate(pairs):
        hub.peers[ours] = Peer(ours, Lines(), rank)
    yield hub, pairs
    for ours, theirs in pairs:
        ours.close()
        theirs.close()
    sock.close()


def test_a_network_slowdown_is_probed_once_and_the_warning_names_the_slow_node(
        tmp_path: Path, peered: Peered, capsys: pytest.CaptureFixture[str]) -> None:
    hub, pairs = peered
    hub.states = slowed_states()
    hub.check_stragglers(100.0)
    assert hub.probing is not None and hub.probing.straggler is not None
    assert capsys.readouterr().err == ""  # no warning before the probes are in
    for _ours, theirs in pairs:
        [request] = Lines().feed(theirs.recv(1 << 16))
        assert request["t"] == "probe" and request["stream"] is True
        assert len(request["peers"]) == 2 and request["id"] == hub.probing.ident
    ident = hub.probing.ident
    rates = {(0, 1): 9.4, (1, 0): 9.1, (0, 2): 0.9, (2, 0): 0.95, (1, 2): 0.92, (2, 1): 0.9}
    for rank in range(3):
        hub.add_probes(rank, {"id": ident, "probes": [stream(a, b, r) for (a, b), r
                                                      in rates.items() if a == rank]})
    hub.tick()  # every rank answered: the round is over
    assert hub.probing is None
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "the probes name rank 2 (node2" in err[0], err
    hub.check_stragglers(200.0)  # the same slowdown later: no second round, no second line
    assert hub.probing is None and capsys.readouterr().err == ""
    saved = json.loads((tmp_path / "warnings.json").read_text())
    assert [(w["ranks"], w["hosts"]) for w in saved] == [([2], ["node2"])]
    assert len(saved[0]["probes"]) == 6  # the round's probes, for the record
    even = {r: RankState(rank=r, world_size=3, step_times=(0.25,) * 20,
                         wait_times=(0.05,) * 20) for r in range(3)}
    hub.states = even
    hub.check_stragglers(300.0)  # even again: the next slowdown is probed anew
    assert hub.probed_wait is None and hub.straggler_probes == ()


def test_a_rounds_probes_are_judged_with_the_steps_that_showed_the_slowdown(
        tmp_path: Path, peered: Peered) -> None:
    """The window moves on during a round (8 s at most): read again at its end, the slowdown
    can fall short of the bar (a lab run: compute noise), and the probes that named the slow
    node were dropped for the generic warning. They explain the steps that started the round."""
    hub, _pairs = peered
    hub.states = slowed_states()
    hub.check_stragglers(100.0)
    assert hub.probing is not None
    ident = hub.probing.ident
    hub.states = {r: RankState(rank=r, world_size=3, host=f"node{r}", step_times=(0.7,) * 20,
                               wait_times=(0.5,) * 20) for r in range(3)}  # all slow now
    rates = {(0, 1): 9.4, (1, 0): 9.1, (0, 2): 0.9, (2, 0): 0.95, (1, 2): 0.92, (2, 1): 0.9}
    for rank in range(3):
        hub.add_probes(rank, {"id": ident, "probes": [stream(a, b, r) for (a, b), r
                                                      in rates.items() if a == rank]})
    hub.tick()
    saved = json.loads((tmp_path / "warnings.json").read_text())
    assert [(w["ranks"], w["hosts"]) for w in saved] == [([2], ["node2"])], saved


def test_a_slowdown_that_got_twice_worse_is_probed_again(tmp_path: Path, peered: Peered) -> None:
    hub, _pairs = peered
    hub.states = slowed_states()
    for k in range(3):  # rounds that name nothing: tried again at the next check, 3 in all
        hub.check_stragglers(100.0 + 10 * k)
        assert hub.probing is not None and hub.probed_wait == pytest.approx(0.5)
        probing, hub.probing = hub.probing, None
        hub.warn_probed(probing)
    hub.check_stragglers(200.0)
    assert hub.probing is None  # the same slowdown: not probed a fourth time
    saved = json.loads((tmp_path / "warnings.json").read_text())
    assert [w["summary"][:12] for w in saved] == ["slow network"]  # the generic one, once
    worse = slowed_states()
    for r, st in worse.items():
        waits = tuple(w * 2.5 if w > 0.1 else w for w in st.wait_times)
        worse[r] = RankState(rank=r, world_size=3, host=st.host, address=st.address,
                             step_times=tuple(0.2 + w for w in waits), wait_times=waits,
                             extra=st.extra)
    hub.states = worse
    hub.check_stragglers(300.0)
    assert hub.probing is not None and hub.probed_wait == pytest.approx(1.25)


def test_a_stall_outranks_a_stragglers_probe_round(tmp_path: Path) -> None:
    sock = listen_socket("127.0.0.1", 0)
    hub = Hub(HubOptions("127.0.0.1", 0, 2, 30, "warn", str(tmp_path), TOKEN), sock)
    hub.states = {0: RankState(rank=0, world_size=2)}
    hub.probing = Probing(1, "straggler", time.monotonic() + 60, {0}, [],
                          straggler=Diagnosis(kind="straggler", summary="slow network"))
    hub.watchdog.due = lambda snapshot, now, silent=(), late=(): "no progress for 30 s"  # type: ignore[method-assign]
    hub.tick()
    assert hub.probing is None or hub.probing.straggler is None
    assert (tmp_path / "report.json").exists()  # acted on the stall at once (nothing to probe)
    sock.close()


def test_the_hub_acks_each_state_with_its_threshold_and_names_each_ranks_peers(
        tmp_path: Path) -> None:
    hub, port, thread = start_hub(tmp_path)
    exits: list[tuple[int, int]] = []
    beacons = []
    for rank in (0, 1):
        rec = Recorder()
        rec.use_fr = False
        b = Beacon(rec, RankState(rank=rank, world_size=2, host=f"h{rank}", address="127.0.0.1"),
                   tmp_path, period=0.2, exit_now=lambda code: exits.append((9, code)))
        b.open_ports(gloo=False)
        b.connect("127.0.0.1", port, token=TOKEN)
        beacons.append(b)
    b0, b1 = beacons
    assert wait_for(lambda: b0.threshold.source == "override" and 1 in b0.peers)
    assert b0.threshold.seconds == 30  # this hub's override; learned when there is none
    assert b0.peers[1].address == "127.0.0.1"
    assert b0.peers[1].extra["ports"] == {"side": b1.ident.extra["ports"]["side"]}
    assert wait_for(lambda: 0 in b1.peers)
    for b in beacons:
        b.close()
    thread.join(10)
    assert exits == [] and hub.introduced == {0, 1}


def test_a_rank_whose_hub_goes_quiet_judges_itself_and_exits_4(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]
                                                               ) -> None:
    """A hub that acks once with a 0.5 s threshold, then vanishes: the heartbeat thread
    outlives the lost connection, waits out threshold + margin without progress, checks
    the hub (refused) and exits 4 with its own verdict in its dump."""
    listener = listen_socket("127.0.0.1", 0)
    port = listener.getsockname()[1]

    def fake_hub() -> None:
        conn, _ = listener.accept()
        conn.recv(1 << 16)
        conn.sendall(json.dumps({"t": "welcome", "token": TOKEN}).encode() + b"\n")
        conn.recv(1 << 16)  # its first state
        conn.sendall(json.dumps({"t": "ack", "threshold": {"seconds": 0.5, "source": "learned",
                                                           "reason": "test"}}).encode() + b"\n")
        time.sleep(0.3)
        conn.close()
        listener.close()

    threading.Thread(target=fake_hub, daemon=True).start()
    exits: list[tuple[int, int]] = []
    b = beacon(1, tmp_path, exits)
    t0 = time.monotonic()
    b.connect("127.0.0.1", port, token=TOKEN)
    assert wait_for(lambda: exits == [(1, 4)], seconds=15)
    took = time.monotonic() - t0
    assert 0.5 + 2.0 <= took < 8, took
    err = capsys.readouterr().err
    assert "ddpnet: watch: rank 1 exits (4): network: rank 1 (h1) made no progress" in err, err
    assert "refuses connections: the hub process is gone" in err and "hint: " in err
    dump = json.loads((tmp_path / "rank-1.json").read_text())
    assert dump["verdict"]["kind"] == "network" and dump["verdict"]["ranks"] == [1]
    b.stopped.set()


def test_a_rank_publishes_one_state_per_period_though_the_hub_answers_states(
        tmp_path: Path) -> None:
    """The hub answers states at once (an ack, then peers); the heartbeat still sends one
    state per period. Returning on the ack made a state/ack storm (~3,000 a second on a
    loopback, 15,000 in a 300-step lab run) that backlogged the hub by ~20 s."""
    exits: list[tuple[int, int]] = []
    hub, _port, _thread, b0, b1 = connected_pair(tmp_path, exits)
    start = hub.published
    time.sleep(1.0)
    sent = hub.published - start
    b0.close()
    b1.close()
    assert sent <= 2 * (1.0 / 0.2 + 2), sent  # two ranks, period 0.2 s
    assert sent >= 2 * 2, sent  # and they do keep publishing


def test_a_ranks_states_are_acked_at_most_every_few_seconds_and_at_once_on_a_new_threshold(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An ack is the hub's word that it hears the rank (``watch.cutoff`` waits threshold +
    margin without one): one per state was 4,096 sends a second at 4,096 ranks."""
    from ddpnet.watch import hub as hub_mod
    from ddpnet.watch.hubstore import Peer
    from ddpnet.watch.threshold import Threshold

    listener = listen_socket("127.0.0.1", 0)
    hub = Hub(HubOptions("127.0.0.1", 0, 2, None, "exit", str(tmp_path), TOKEN), listener)
    mine, theirs = socket.socketpair()
    theirs.settimeout(0.2)
    peer = Peer(mine, Lines(), rank=1)

    def acks() -> list[dict[str, object]]:
        try:
            data = theirs.recv(1 << 16)
        except TimeoutError:
            return []
        return [json.loads(line) for line in data.splitlines()]

    try:
        hub.acknowledge(peer, 1)
        (first,) = acks()
        assert first["t"] == "ack" and first["threshold"]["source"] == "warm-up"  # type: ignore[index]
        hub.acknowledge(peer, 1)  # the next heartbeat, a moment later: nothing to say
        assert acks() == []
        hub.watchdog.threshold = Threshold(7.0, "learned", "test")
        hub.acknowledge(peer, 1)  # a new threshold is told at once
        (second,) = acks()
        assert second["threshold"]["seconds"] == 7.0  # type: ignore[index]
        monkeypatch.setattr(hub_mod, "ACK_EVERY_S", 0.1)
        time.sleep(0.15)
        hub.acknowledge(peer, 1)  # and the same one again once ACK_EVERY_S has passed
        assert [a["threshold"]["seconds"] for a in acks()] == [7.0]  # type: ignore[index]
    finally:
        mine.close()
        theirs.close()
        listener.close()


def test_the_watchdog_ticks_slower_above_1024_ranks_so_its_work_a_second_stays_flat() -> None:
    assert tick_every(2) == tick_every(1024) == 0.1
    assert tick_every(4096) == pytest.approx(0.4)


def test_silence_is_judged_as_of_what_the_hub_had_read_not_the_clock_after_reading(
        tmp_path: Path) -> None:
    """A hub short of CPU reads a round of heartbeats for seconds: a rank whose newest
    heartbeat came just before the round began is not silent, however long the reading took
    (session 12: thousands of live ranks named gone at 4,096 ranks on 0.6 of a core)."""
    sock = listen_socket("127.0.0.1", 0)
    hub = Hub(HubOptions("127.0.0.1", 0, 2, 30, "exit", str(tmp_path), TOKEN), sock)
    wall, mono = time.time(), time.monotonic()
    hub.states = {r: RankState(rank=r, world_size=2, host=f"h{r}", published=wall - 20.0)
                  for r in range(2)}
    hub.read_as_of = (mono - 19.5, wall - 19.5)  # the round began 19.5 s ago
    assert hub.snapshot().taken == wall - 19.5
    assert hub.silent(hub.snapshot()) == ()
    hub.read_as_of = None  # judged by the clock: 20 s of silence
    assert hub.silent(hub.snapshot()) == (0, 1)
    sock.close()


@pytest.mark.parametrize("skew", [300.0, -300.0])
@pytest.mark.parametrize("stops", [0, 1])
def test_a_rank_whose_clock_is_minutes_off_is_judged_by_when_the_hub_heard_it(
        tmp_path: Path, skew: float, stops: int) -> None:
    """Rank 1's clock is ``skew`` seconds off the hub's. Every age is the hub's own, from
    when it received a state: the skewed rank is not silent while it is heard (-300 s read
    as 5 minutes of silence), and its silence is not hidden when it stops (+300 s hid it)."""
    from ddpnet.watch.analyze import Options, analyze

    sock = listen_socket("127.0.0.1", 0)
    hub = Hub(HubOptions("127.0.0.1", 0, 2, 30, "exit", str(tmp_path), TOKEN), sock)
    wall = time.time()
    for rank, clock in ((0, wall), (1, wall + skew)):  # both in all_reduce #3 for 2 s
        hub.handle_rank(rank, "state", {"state": RankState(
            rank=rank, world_size=2, host=f"h{rank}", step=5, last_seq=2, published=clock,
            recent=(CollectiveRecord(seq=3, op="all_reduce", started=clock - 2),)).to_dict()})
    mono = time.monotonic()
    hub.read_as_of = (mono, wall)
    assert hub.silent(hub.snapshot()) == ()
    assert analyze(hub.snapshot(), Options(stale_after=hub.watchdog.stale_after)).kind in \
        ("network", "stalled")  # every rank waits in one collective: nobody is gone
    hub.heard[stops] = mono - 20.0  # its last state came 20 s ago; the other's just now
    assert hub.silent(hub.snapshot()) == (stops,)
    found = analyze(hub.snapshot(), Options(stale_after=hub.watchdog.stale_after))
    assert found.kind == "rank-gone" and found.ranks == (stops,)
    assert f"rank {stops} (h{stops}) is gone: no heartbeat for 20 s" in found.summary
    assert any(line.startswith(f"rank {1 - stops} (h{1 - stops}) waits in all_reduce seq 3 "
                               "for 2 s") for line in found.evidence)
    sock.close()


def test_a_serving_hub_reads_as_of_its_last_select_and_reports_how_far_behind_it_ran(
        tmp_path: Path) -> None:
    exits: list[tuple[int, int]] = []
    hub, _port, _thread, b0, b1 = connected_pair(tmp_path, exits)
    before = time.monotonic()
    assert wait_for(lambda: hub.read_as_of is not None and hub.read_as_of[0] > before)
    mono, wall = hub.as_of()
    assert 0 <= time.monotonic() - mono < 5 and abs(time.time() - wall - (time.monotonic()
                                                                         - mono)) < 1
    assert 0 <= hub.most_behind < 5
    b0.close()
    b1.close()


def test_a_working_rank_is_warned_once_a_stall_and_named_only_once_it_stops(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.watch.test_watchdog import held

    sock = listen_socket("127.0.0.1", 0)
    hub = Hub(HubOptions("127.0.0.1", 0, 2, None, "exit", str(tmp_path), TOKEN), sock)
    base = time.monotonic()  # held()'s ranks publish a fast loop's gaps: the 5 s floor

    def at(t: float, moved: float) -> None:
        hub.states = {r: s for r, s in held(base + t, base + moved).states.items()
                      if s is not None}
        hub.read_as_of = (base + t, base + t)
        hub.tick()

    for t in (0.0, 6.0, 7.0, 20.0, 24.0):  # working until 20, then still
        at(t, min(t, 20.0))
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(
        "ddpnet: watch: warning: working: rank 0 (h0) keeps 1 rank(s) waiting in all_reduce")
    assert "torch/serialization.py:965 in save, called at train.py:88 in main" in err[0]
    assert not (tmp_path / "report.json").exists() and hub.verdict_at is None
    at(25.5, 20.0)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["kind"] == "rank-not-arriving" and "worked until" in report["trigger"]
    evidence = report["diagnosis"]["evidence"]
    assert any("rank 0 (h0) has not worked for 6 s" in line for line in evidence)
    assert evidence[-1].startswith("rank(s) 0 worked until ")
    assert [w["kind"] for w in json.loads((tmp_path / "warnings.json").read_text())] == \
        ["working"]
    sock.close()


def test_the_hubs_own_flap_holds_the_verdict_once_and_a_stop_after_it_is_named(
        tmp_path: Path) -> None:
    """Ranks 1 and 2, every rank off the hub's host, unheard together and answering the
    probes again: no verdict for OUTAGE_HOLD_S; still unheard after it, the verdict, which
    says it was held and why."""
    from ddpnet.watch.state import LinkProbe
    from ddpnet.watch.watchdog import OUTAGE_HOLD_S
    from tests.watch.test_watchdog import FAST_GAPS, three_hosts

    sock = listen_socket("127.0.0.1", 0)
    hub = Hub(HubOptions("127.0.0.1", 0, 3, None, "exit", str(tmp_path), TOKEN), sock)
    base = time.monotonic()
    answered = [LinkProbe(src_rank=0, dst_rank=r, reachable=True) for r in (1, 2)]
    rounds: list[str] = []

    def ask_probes(trigger: str, now: float) -> bool:  # rank 0 reaches both (no sockets here)
        rounds.append(trigger)
        hub.probing = Probing(len(rounds), trigger, now + 2.0, set(), list(answered))
        return True

    hub.ask_probes = ask_probes  # type: ignore[method-assign]

    def at(t: float, heard: dict[int, float]) -> None:
        hub.states = {r: replace(s, extra=FAST_GAPS)
                      for r, s in three_hosts({}).states.items() if s is not None}
        hub.heard = {r: base + h for r, h in heard.items()}
        hub.read_as_of = (base + t, base + t)
        hub.tick()

    at(0.0, {0: 0.0, 1: 0.0, 2: 0.0})
    at(5.0, {0: 5.0, 1: 0.0, 2: 0.0})  # 1 and 2 silent past stale_after: probed
    at(5.1, {0: 5.0, 1: 0.0, 2: 0.0})  # the round is over: held, not named
    assert len(rounds) == 1 and hub.watchdog.late == {1, 2}
    assert hub.watchdog.told.source == "unheard"
    assert not (tmp_path / "report.json").exists() and hub.verdict_at is None
    at(5.1 + OUTAGE_HOLD_S - 0.2, {0: 15.0, 1: 0.0, 2: 0.0})
    assert len(rounds) == 1 and hub.verdict_at is None
    at(5.1 + OUTAGE_HOLD_S + 0.1, {0: 15.0, 1: 0.0, 2: 0.0})  # probed again
    at(5.1 + OUTAGE_HOLD_S + 0.2, {0: 15.0, 1: 0.0, 2: 0.0})  # named this time
    assert len(rounds) == 2 and hub.verdict_at is not None
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["kind"] == "rank-gone" and report["diagnosis"]["ranks"] == [1, 2]
    assert report["threshold"]["source"] == "learned"  # judged by; "unheard" is the ranks'
    assert any(line.startswith(f"held {OUTAGE_HOLD_S:g} s: rank(s) 1, 2") for line in
               report["diagnosis"]["evidence"])
    sock.close()


def test_a_rank_notes_its_long_phases_apart_and_the_hubs_as_points(tmp_path: Path) -> None:
    """Gaps over them teach nothing (``watch.gaps``). Each eval its own span: merged, ddpnet
    train's eval every 10 steps covered the steps between and the job never learned."""
    from ddpnet.watch.threshold import Threshold

    b = beacon(1, tmp_path, [])
    b.note_long("eval", 100.0, 101.0)
    b.note_long("eval", 100.0, 102.0)
    b.note_long("", 0.0, 103.0)  # it ended since the last beat
    b.note_long("", 0.0, 103.5)
    b.note_long("eval", 104.0, 105.0)  # the next eval
    assert b.long_seen == ((100.0, 103.0), (104.0, 105.0))
    b.threshold = Threshold(120.0, "phase", "rank(s) 0 in phase 'checkpoint'")
    b.note_long("", 0.0, 106.0)
    assert b.long_seen[-2:] == ((104.0, 106.0), (106.0, 106.0))


def test_a_working_hold_told_by_the_hub_is_a_point_its_gaps_do_not_learn(
        tmp_path: Path) -> None:
    """A rank that waited for an unmarked 25 s checkpoint would learn a 75 s threshold."""
    from ddpnet.watch.threshold import Threshold, held

    b = beacon(1, tmp_path, [])
    b.threshold = Threshold(5.0, "learned", "floor")
    b.note_long("", 0.0, 100.0)
    assert b.long_seen == ()
    b.threshold = held(b.threshold, (0,))
    assert b.threshold.seconds == 5.0 and b.threshold.source == "working"
    b.note_long("", 0.0, 101.0)
    assert b.long_seen == ((101.0, 101.0),)


def test_a_rank_that_hears_no_ack_marks_a_point_its_gaps_do_not_learn(tmp_path: Path) -> None:
    """Its link or the hub's is down (a flap): the gap it waits through is the network's, and
    the hub cannot tell it so. Before any ack (no hub yet), nothing is marked."""
    from ddpnet.watch.threshold import Threshold

    b = beacon(1, tmp_path, [])
    b.threshold = Threshold(5.0, "learned", "floor")
    b.heard = time.monotonic() - 30.0
    b.note_long("", 0.0, 100.0)
    assert b.long_seen == ()  # never acked
    b.known.set()
    b.heard = time.monotonic() - 1.0
    b.note_long("", 0.0, 101.0)
    assert b.long_seen == ()
    b.heard = time.monotonic() - 5.0  # past stale_after (4 s at a 5 s threshold)
    b.note_long("", 0.0, 102.0)
    assert b.long_seen == ((102.0, 102.0),)


def test_a_teach_nothing_ack_is_a_point_at_the_next_beat_though_another_ack_replaced_it(
        tmp_path: Path) -> None:
    """The hub's word can be over before the rank's beat reads it (a flap's unheard seconds):
    the next beat still marks the point."""
    from ddpnet.watch.threshold import Threshold, unheard

    b = beacon(1, tmp_path, [])
    learned = Threshold(5.0, "learned", "floor")
    b.handle({"t": "ack", "threshold": unheard(learned, (2,)).to_dict()})
    b.handle({"t": "ack", "threshold": learned.to_dict()})
    b.note_long("", 0.0, 100.0)
    b.note_long("", 0.0, 101.0)
    assert b.long_seen == ((100.0, 100.0),)


def test_quiet_is_by_the_hubs_own_clock_and_skips_ranks_that_left(tmp_path: Path) -> None:
    """A rank's clock may be minutes off: silence is when this hub last read from it."""
    sock = listen_socket("127.0.0.1", 0)
    hub = Hub(HubOptions("127.0.0.1", 0, 3, None, "exit", str(tmp_path), TOKEN), sock)
    now = time.monotonic()
    hub.heard = {0: now - 0.5, 1: now - 30.0, 2: now - 30.0}
    hub.left[2] = "its process exited"
    hub.read_as_of = (now, time.time())
    assert hub.silent(hub.snapshot()) == (1,)
    hub.handle_rank(1, "call", {"record": {"seq": 1, "op": "all_reduce"}})
    hub.read_as_of = None
    assert hub.silent(hub.snapshot()) == ()
    sock.close()


def test_a_rank_that_ended_while_it_connected_says_goodbye_once_connected(
        tmp_path: Path) -> None:
    """Ranks connect in the background (``session.start``): a short job may end first. Told
    nothing, the hub would wait FIRST_RANK_S for ranks that are gone."""
    hub, port, _thread = start_hub(tmp_path)
    b = beacon(0, tmp_path, [])
    b.close()  # the job ended before its connect finished
    b.connect("127.0.0.1", port, token=TOKEN)
    assert wait_for(lambda: 0 in hub.finished and 0 in hub.states)
    assert b.thread is None and b.sock is None  # no heartbeat started


def test_steps_older_than_a_full_ring_feed_no_wait_of_zero(tmp_path: Path) -> None:
    """A fast loop: 40 steps between two beats, one 1 ms collective each, the ring keeps the
    last 32. The 8 steps before the ring's oldest would read as 0 s of wait (a false 'slow
    network' once the window compared its halves): they are left out."""
    from ddpnet.watch.recorder import RING
    from ddpnet.watch.state import CollectiveRecord

    b = beacon(0, tmp_path, [])
    rec = b.recorder
    for k in range(40):
        rec.called.append(CollectiveRecord(seq=k + 1, op="all_reduce", started=100.0 + k * 0.01,
                                           ended=100.001 + k * 0.01, state="completed"))
        rec.spans.append((100.0 + k * 0.01 - 0.005, 100.0 + k * 0.01 + 0.005))
    assert len(rec.called) == RING
    b.state()
    # the step around the ring's oldest collective began before it: out too (it may have
    # held an older one)
    assert len(b.window.wait_times) == RING - 1, b.window.wait_times
    assert min(b.window.wait_times) > 0.0


def metrics_hub(tmp_path: Path, world: int = 3) -> tuple[Hub, socket.socket]:
    from ddpnet.net.exposition import bind

    sock = listen_socket("127.0.0.1", 0)
    hub = Hub(HubOptions("127.0.0.1", 0, world, 30, "warn", str(tmp_path), TOKEN,
                         job_id="j1", probe_every=60.0), sock)
    hub.serve_metrics(bind("127.0.0.1", 0, "metrics port"))
    return hub, sock



@contextlib.contextmanager
def three_ranks(hub: Hub, sock: socket.socket) -> Iterator[list[tuple[socket.socket, socket.socket]]]:
    """Three ranks connected to a metrics hub (``metrics_hub``) over socket pairs: the hub's
    end and the rank's; everything closed after."""
    from ddpnet.watch.hubstore import Peer

    pairs = [socket.socketpair() for _ in range(3)]
    try:
        for rank, (ours, _theirs) in enumerate(pairs):
            hub.peers[ours] = Peer(ours, Lines(), rank)
        yield pairs
    finally:
        for ours, theirs in pairs:
            ours.close()
            theirs.close()
        assert hub.metrics is not None
        hub.metrics.close()
        sock.close()

def scrape(hub: Hub) -> str:
    import urllib.request

    url = f"http://127.0.0.1:{hub.metrics.port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        return str(answer.read().decode())


def test_the_hub_serves_each_ranks_own_counts_from_its_last_state(tmp_path: Path) -> None:
    hub, sock = metrics_hub(tmp_path, world=2)
    try:
        for rank in range(2):  # the same state twice, then one 400 steps on (a fast loop)
            for done in (2, 2, 402):
                state = RankState(rank=rank, world_size=2, host=f"node{rank}", step=done,
                                  step_times=(0.002,) * min(done, 50),
                                  wait_times=(0.001,) * min(done, 50),
                                  step_counts=(done,), step_seconds=0.002 * done,
                                  wait_seconds=0.001 * done)
                hub.handle_rank(rank, "state", {"state": state.to_dict()})
        text = scrape(hub)
        for rank in range(2):
            labels = f'{{host="node{rank}",job_id="j1",rank="{rank}"}}'
            assert f"ddpnet_step_seconds_count{labels} 402.0" in text
            assert f"ddpnet_steps_total{labels} 402.0" in text
            assert f"ddpnet_collective_wait_seconds_count{labels} 402.0" in text
        assert TOKEN not in text
    finally:
        hub.metrics.close()
        sock.close()


def test_with_metrics_the_hub_probes_the_links_now_and_then_and_names_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ddpnet.watch.hubstore import FIRST_LINKS_S, LINKS

    hub, sock = metrics_hub(tmp_path)
    hub.states = slowed_states(steps=2)  # too few steps for any straggler analysis
    with three_ranks(hub, sock) as pairs:
        hub.read_as_of = (1000.0, time.time())
        hub.tick()
        assert hub.probing is None  # every rank just published: the first round waits
        hub.read_as_of = (1000.0 + FIRST_LINKS_S - 0.5, time.time())
        hub.tick()
        assert hub.probing is None  # seconds, not probe_every (a minute here)
        hub.read_as_of = (1000.0 + FIRST_LINKS_S + 0.5, time.time())
        hub.tick()
        assert hub.probing is not None and hub.probing.trigger == LINKS
        for _ours, theirs in pairs:
            [request] = Lines().feed(theirs.recv(1 << 16))
            assert request["t"] == "probe" and request["stream"] is True
        ident = hub.probing.ident
        for rank in range(3):
            hub.add_probes(rank, {"id": ident, "probes": [
                {**stream(rank, peer, 8.0), "rtt_s": 0.001} for peer in range(3) if peer != rank]})
        hub.tick()  # the round is over: kept for the metrics, no warning, no verdict
        assert hub.probing is None and not hub.watchdog.fired
        assert capsys.readouterr().err == ""
        text = scrape(hub)
        assert ('ddpnet_probe_bandwidth_bytes_per_second{host="node0",job_id="j1",'
                'peer_host="node2"} 1e+09') in text
        hub.tick()
        assert hub.probing is None  # the next round waits probe_every
        hub.read_as_of = (1000.0 + FIRST_LINKS_S + 0.5 + hub.options.probe_every - 1, time.time())
        hub.tick()
        assert hub.probing is None
        hub.read_as_of = (1000.0 + FIRST_LINKS_S + 0.5 + hub.options.probe_every + 1, time.time())
        hub.tick()
        assert hub.probing is not None and hub.probing.trigger == LINKS


def test_a_links_round_due_as_a_straggler_round_starts_waits_for_it(tmp_path: Path) -> None:
    """Both in one tick: the links round replaced the straggler's (whose warning then waited
    for a later check) and every rank was asked for two rounds at once, streaming twice."""
    from ddpnet.watch.hubstore import LINKS

    hub, sock = metrics_hub(tmp_path)
    hub.states = slowed_states()  # a network slowdown: the straggler check probes it
    hub.next_links = 999.0  # and the links round is due
    with three_ranks(hub, sock) as pairs:
        hub.read_as_of = (1000.0, time.time())
        hub.tick()
        assert hub.probing is not None and hub.probing.straggler is not None
        for _ours, theirs in pairs:
            theirs.setblocking(False)
            assert len(Lines().feed(theirs.recv(1 << 16))) == 1  # one round asked
        ident = hub.probing.ident
        for rank in range(3):
            hub.add_probes(rank, {"id": ident, "probes": []})
        hub.read_as_of = (1000.5, time.time())
        hub.tick()  # the straggler's round is over: its warning
        assert hub.probing is None
        hub.read_as_of = (1000.6, time.time())
        hub.tick()  # then the links round that waited
        assert hub.probing is not None and hub.probing.trigger == LINKS


def test_with_metrics_a_verdict_waits_for_the_next_scrape_only_while_something_scrapes(
        tmp_path: Path) -> None:
    hub, sock = metrics_hub(tmp_path)
    try:
        # warn: the verdict was given, then every rank went: the job is over for the hub
        hub.watchdog.fired = True
        hub.left = {rank: "killed" for rank in range(3)}
        hub.judged_at = time.monotonic()
        assert hub.done()  # nothing ever scraped: nobody to wait for
        scrape(hub)
        hub.verdicts.append(Diagnosis("rank-gone", "rank 2 gone", ranks=(2,)))
        hub.judged_at = time.monotonic()
        assert not hub.done()  # a scraper is there: its next scrape renders the verdict
        # bounded: waited for until the linger has passed (a hair past it: judged_at + linger
        # - judged_at can round below linger, as it did at judged_at 498.100286167)
        linger = hub.options.metrics_linger
        assert not hub.verdict_seen(hub.judged_at + linger - 1)
        assert hub.verdict_seen(hub.judged_at + linger + 0.01)
        assert 'ddpnet_verdict{host="",job_id="j1",kind="rank-gone",rank="2"} 1.0' in scrape(hub)
        assert hub.done()
    finally:
        hub.metrics.close()
        sock.close()


def test_a_peer_failure_before_this_ranks_heartbeat_connected_is_said_once_it_is(
        tmp_path: Path) -> None:
    """Rank 0's heartbeat still connects (its hub starting on a loaded host) when rank 1 dies
    and rank 0's gloo raises: its "a peer failed" goodbye waits for the handshake (sent
    before it, it was lost), the hub, up after its verdict while a rank was never heard, says
    the verdict to the late rank, and rank 0 exits 4, named as no fault of its own."""
    exits: list[tuple[int, int]] = []
    hub, port, thread = start_hub(tmp_path)
    b0, b1 = beacon(0, tmp_path, exits), beacon(1, tmp_path, exits)
    b1.connect("127.0.0.1", port, token=TOKEN)
    assert wait_for(lambda: 1 in hub.states)
    sock = b1.sock
    assert sock is not None
    b1.stopped.set()
    sock.close()  # rank 1 killed
    assert wait_for(lambda: hub.verdict_at is not None)
    dying = threading.Thread(target=b0.await_verdict,
                             args=("RuntimeError: Connection closed by peer", 10.0))
    dying.start()
    time.sleep(0.5)  # the failure came first, the handshake after
    b0.connect("127.0.0.1", port, token=TOKEN)
    dying.join(15)
    assert exits == [(0, 4)], (exits, hub.left)
    assert "exited with an error" not in hub.left.get(0, ""), hub.left
    thread.join(20)
    assert not thread.is_alive()
