"""Whether a rank works: the pure judgement on fixture activities, and the sampler on real
threads of this process (a busy thread, a blocked one, a file written, a stack that moves)."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ddpnet.watch import activity
from ddpnet.watch.activity import Activity, Sampler, doing, idle_for, working
from ddpnet.watch.probe import PORTS_KEY, SINK, STREAM, ProbeSink, probe_pairs
from ddpnet.watch.state import RankState, Snapshot

STACK = ("serialization.py:650 in _save", "torch/serialization.py:965 in save",
         "train.py:88 in main")


def act(at: float, cpu: float = 0.0, written: int = 0, stack: tuple[str, ...] = STACK,
        **more: object) -> Activity:
    return Activity(at=at, cpu=cpu, main_cpu=cpu, read=0, written=written, stack=stack,
                    **more)  # type: ignore[arg-type]


def test_cpu_io_or_a_new_stack_is_work_and_nothing_moving_is_not() -> None:
    before = act(10.0, cpu=3.0, written=1000)
    assert working(before, act(11.0, cpu=3.5, written=1000)).cpu  # half a core
    assert working(before, act(11.0, cpu=3.01, written=1000)).working is False  # 1%: noise
    moved = working(before, act(11.0, cpu=3.0, written=1000 + 5_000_000))
    assert moved.working and moved.io and "wrote 5.0 MB" in moved.why
    assert working(before, act(11.0, cpu=3.0, written=1000 + 1000)).working is False
    other = ("train.py:40 in evaluate",)
    assert working(before, act(11.0, cpu=3.0, written=1000, stack=other)).stack
    # a polling loop that comes back to a stack seen lately stands still
    assert working(before, act(11.0, cpu=3.0, written=1000, stack=other),
                   seen=(other, STACK)).working is False


def test_nothing_known_is_unknown_not_idle() -> None:
    assert working(Activity(at=1.0), Activity(at=2.0)).working is None


def test_activity_round_trips_through_a_ranks_state_as_json() -> None:
    found = act(5.0, cpu=1.5, written=7, call="torch/serialization.py:965 in save",
                user="train.py:88 in main", share=0.9, cpu_at=5.0, io_at=4.0, stack_at=3.0)
    state = RankState(rank=0, world_size=2, published=5.0,
                      extra={activity.KEY: found.to_dict()})
    back = RankState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert activity.of(back) == found and found.active_at == 5.0
    assert activity.of(RankState(rank=0, world_size=2)) is None
    assert activity.of(RankState(rank=0, world_size=2, extra={activity.KEY: "junk"})) is None
    wrong = RankState(rank=0, world_size=2, extra={activity.KEY: {"cpu_at": "soon"}})
    assert activity.of(wrong) is None and idle_for(Snapshot(2, 1.0, {0: wrong}), 0) is None


def test_idle_counts_from_the_last_movement_and_the_heartbeats_age() -> None:
    found = act(20.0, cpu_at=12.0, io_at=15.0, stack_at=10.0)
    state = RankState(rank=0, world_size=2, published=20.0,
                      extra={activity.KEY: found.to_dict()})
    # moved at 15 by its clock, heartbeat 3 s old: by the hub's clock from when it received
    # it, whatever the hub's wall clock says; a dump's own time against the snapshot's
    assert idle_for(Snapshot(2, 9999.0, {0: state}, ages={0: 3.0}), 0) == 8.0
    assert idle_for(Snapshot(2, 23.0, {0: state}), 0) == 8.0
    assert idle_for(Snapshot(2, 23.0, {0: RankState(rank=0, world_size=2)}), 0) is None


def test_doing_names_the_library_call_the_users_line_cpu_and_bytes_since() -> None:
    now = act(30.0, written=2_500_000_000, call="torch/serialization.py:965 in save",
              user="train.py:88 in main", share=0.42)
    line = doing(now, act(5.0, written=500_000_000))
    assert line == ("torch/serialization.py:965 in save, called at train.py:88 in main, "
                    "CPU 42%, wrote 2.0 GB since")
    assert doing(act(1.0, user="train.py:30 in data")) == "at train.py:30 in data"


# -- the sampler on real threads ---------------------------------------------------------------

def sampled(sampler: Sampler, between: Callable[[], object]) -> tuple[Activity, Activity]:
    """Two samples taken in a thread of the watch's (its own CPU and I/O left out), with
    ``between`` run in this thread after the first; this thread then waits on an event."""
    out: list[Activity] = []
    first, done = threading.Event(), threading.Event()

    def run() -> None:
        sampler.sample()  # the first: psutil imported, children listed
        out.append(sampler.sample())
        first.set()
        done.wait(30)
        out.append(sampler.sample())

    thread = threading.Thread(target=run, name="ddpnet-watch-heartbeat", daemon=True)
    thread.start()
    assert first.wait(30)
    between()
    done.set()
    thread.join(30)
    return out[0], out[1]


@contextmanager
def blocked_thread(name: str = "blocked") -> Iterator[threading.Thread]:
    """A thread blocked on an event (a rank blocked on a lock) until the block ends."""
    release = threading.Event()
    thread = threading.Thread(target=release.wait, args=(60,), name=name, daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        release.set()
        thread.join(10)


def test_a_blocked_main_thread_in_an_idle_process_does_not_work() -> None:
    with blocked_thread() as main:
        sampler = Sampler(main=main)
        before, after = sampled(sampler, lambda: time.sleep(1.0))
    moved = working(before, after)
    assert moved.working is False, moved.why
    assert after.stack == before.stack and "in wait" in after.stack[0]
    assert after.cpu_at == before.cpu_at and after.io_at == before.io_at


def test_a_busy_thread_is_work_and_its_cpu_is_counted() -> None:
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(i * i for i in range(1000))

    busy = threading.Thread(target=spin, name="busy", daemon=True)
    busy.start()
    try:
        before, after = sampled(Sampler(main=busy), lambda: time.sleep(1.0))
    finally:
        stop.set()
        busy.join(10)
    assert working(before, after).cpu
    assert after.cpu is not None and before.cpu is not None and after.cpu > before.cpu
    assert after.main_cpu is not None and before.main_cpu is not None
    assert after.main_cpu > before.main_cpu  # the "main" thread here is the busy one
    assert after.share is not None and after.share >= activity.CPU_SHARE
    assert after.cpu_at == after.at


def test_bytes_written_to_a_file_are_work(tmp_path: Path) -> None:
    def write() -> None:
        with open(tmp_path / "ckpt.bin", "wb") as f:
            for _ in range(4):
                f.write(os.urandom(256 * 1024))
                f.flush()
                os.fsync(f.fileno())

    with blocked_thread() as main:
        before, after = sampled(Sampler(main=main), write)
    if after.written is None:  # no I/O accounting in this kernel: nothing to judge by
        return
    assert before.written is not None and after.written - before.written >= 1024 * 1024
    assert working(before, after).io and after.io_at == after.at


def test_a_stack_that_moves_is_work_and_names_the_users_line() -> None:
    entered, leave, go = threading.Event(), threading.Event(), threading.Event()

    def inner() -> None:
        entered.set()
        leave.wait(60)

    def outer() -> None:
        go.wait(60)
        inner()

    main = threading.Thread(target=outer, name="main-ish", daemon=True)
    main.start()
    try:
        def step() -> None:
            go.set()
            assert entered.wait(30)

        before, after = sampled(Sampler(main=main), step)
    finally:
        leave.set()
        main.join(10)
    assert working(before, after).stack and after.stack_at == after.at
    assert after.user.startswith("test_activity.py:") and after.user.endswith("in inner")
    assert after.call.startswith("threading.py:") and after.call.endswith("in wait")
    assert before.user.endswith("in outer")


def test_without_proc_the_sampler_says_unknown_and_never_raises(tmp_path: Path) -> None:
    sampler = Sampler(proc=str(tmp_path / "no-proc"))
    first, second = sampler.sample(), sampler.sample()
    assert second.main_cpu is None and second.read is None and second.written is None
    assert second.stack and first.at <= second.at


def test_a_sample_costs_well_under_a_millisecond_of_cpu() -> None:
    """CPU time, not wall time: a loaded machine slows the wall clock, not the work."""
    sampler = Sampler()
    sampler.sample()
    spent = time.thread_time()
    for _ in range(50):
        sampler.sample()
    per = (time.thread_time() - spent) / 50
    assert per < 0.002, f"{per * 1e3:.2f} ms of CPU a sample"


def test_the_heartbeats_of_one_process_share_its_sample() -> None:
    sampler = activity.shared()
    assert activity.shared() is sampler
    first = sampler.sample()
    assert sampler.sample(max_age=60) is first  # served again while fresh
    assert sampler.sample() is not first


def test_the_watchs_own_threads_cpu_is_not_the_ranks_work() -> None:
    """A probe thread (``ddpnet-watch-probe``) that burns CPU notes it: the rank, blocked,
    stands still (the same burn in a thread of the rank's is work: the busy test)."""
    def burn() -> None:
        end = time.thread_time() + 0.3
        while time.thread_time() < end:
            sum(i * i for i in range(1000))
        sampler.note_watch()

    def probe() -> None:
        thread = threading.Thread(target=burn, name="ddpnet-watch-probe", daemon=True)
        thread.start()
        thread.join(30)

    with blocked_thread() as main:
        sampler = Sampler(main=main)
        before, after = sampled(sampler, probe)
    assert not working(before, after).cpu, after.share


#: bytes a probe round below streams through loopback (~0.1 CPU-s at both ends)
STREAMED = 256 << 20


def test_a_probe_round_into_and_out_of_a_sleeping_rank_is_not_its_work() -> None:
    """A stall's or a straggler's probe round runs in the watch's threads: the prober's pool
    streams to a peer's sink and this rank's sink reads its peers' streams. A rank asleep in
    its data loader stands still through it. Before, neither the pool nor the sink's readers
    noted their CPU: a round into a sleeping rank made it "work", the watchdog held the
    verdict for it, and a loaded lab run named the data loader after 17.7 s, not ~6 s."""
    spent: list[float] = []

    def probe_round() -> None:
        # the heartbeat's probe thread, streaming into this same process's sink
        def run() -> None:
            cpu = time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID)
            states = {0: RankState(rank=0, world_size=2, address="127.0.0.1"),
                      1: RankState(rank=1, world_size=2, address="127.0.0.1",
                                   extra={PORTS_KEY: {SINK: sink.port}})}
            # a fixed amount, not the probes' 0.3 s: the work is the same on a loaded host
            found = probe_pairs(states, 0, timeout=60.0, stream_bytes=STREAMED,
                                stream_seconds=60.0, note=sampler.note_watch)
            stream = [p for p in found if p.what == STREAM]
            assert [p.outcome for p in stream] == ["streamed"], found
            assert stream[0].detail.startswith(f"stream: {STREAMED} bytes acked"), stream
            time.sleep(0.2)  # the sink's reader has read the last bytes
            spent.append(time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID) - cpu)

        thread = threading.Thread(target=run, name="ddpnet-watch-probe", daemon=True)
        thread.start()
        thread.join(30)

    with blocked_thread() as main:
        sampler = Sampler(main=main)
        with ProbeSink("127.0.0.1", note=sampler.note_watch) as sink:
            before, after = sampled(sampler, probe_round)
    assert spent and spent[0] > 0.01, spent  # both ends' CPU for the bytes streamed
    assert after.cpu is not None and before.cpu is not None
    assert after.cpu - before.cpu < 0.25 * spent[0], (after.cpu - before.cpu, spent)
    assert not working(before, after).cpu, (after.share, spent)


def _spin() -> None:
    while True:
        pass


def test_a_forked_workers_cpu_is_the_ranks_work() -> None:
    """A DataLoader-like worker (a forked multiprocessing child) burning CPU while the main
    thread waits for it."""
    worker = multiprocessing.get_context("fork").Process(target=_spin, daemon=True)
    worker.start()
    try:
        with blocked_thread() as main:
            before, after = sampled(Sampler(main=main), lambda: time.sleep(1.0))
    finally:
        worker.kill()
        worker.join(10)
    assert working(before, after).cpu, after.share


def test_another_childs_cpu_counts_only_while_the_main_thread_waits_on_it() -> None:
    """A child that is no worker (a wandb service, an upload tool): its CPU is the rank's work
    only while the main thread waits on a subprocess."""
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with blocked_thread() as main:
            before, after = sampled(Sampler(main=main), lambda: time.sleep(1.0))
        assert not working(before, after).cpu, after.share
        waiter = threading.Thread(target=child.wait, name="waits", daemon=True)
        waiter.start()
        before, after = sampled(Sampler(main=waiter), lambda: time.sleep(1.0))
        assert any(f.startswith("subprocess.py:") for f in after.stack), after.stack
        assert working(before, after).cpu, after.share
    finally:
        child.kill()
        child.wait(10)
