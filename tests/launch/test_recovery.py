"""What a job does about a verdict, given its record: restart without the blamed node, or
stop with every verdict so far (never a loop, never a wrong target)."""

from __future__ import annotations

import json

from ddpnet.launch.blame import Blame
from ddpnet.launch.recovery import Event, Record, decide, match_node, step_nodes

NODES = ("n0", "n1", "n2")
POOL = ("n0", "n1", "n2", "n3")


def cut(host: str, step: int) -> Blame:
    return Blame("network", f"link down: rank 1 ({host})", host,
                 f"ddpnet: network: link down: rank 1 ({host})", step=step)


def recovered(record: Record, verdict: Blame, run: int, how: str = "drain") -> Record:
    """The record after a recovery of ``verdict`` in ``run``."""
    return record.add(Event("verdict", run, 1.0, verdict.host, verdict=verdict,
                            step=verdict.step),
                      Event(how, run, 2.0, verdict.host, verdict.reason),
                      Event("requeue", run, 3.0), Event("resumed", run + 1, 4.0, step=40))


def test_a_blamed_node_of_the_job_is_taken_out() -> None:
    d = decide(Record("7"), cut("n1", 45), NODES, POOL, 3)
    assert d.restart and d.node == "n1" and d.history == ()


def test_a_verdict_that_blames_no_node_stops_with_its_why() -> None:
    none = Blame("collective-mismatch", "seq 9", why="the program's bug")
    d = decide(Record("7"), none, NODES, POOL, 3)
    assert not d.restart and d.why == "the program's bug"


def test_a_host_outside_the_job_is_never_drained() -> None:
    d = decide(Record("7"), cut("elsewhere", 45), NODES, POOL, 3)
    assert not d.restart and "none of this job's nodes (n0, n1, n2)" in d.why


def test_the_ranks_fqdn_matches_slurms_short_node_name() -> None:
    assert match_node("n1.cluster.org", NODES) == "n1"
    assert match_node("n1", ("n1.a", "n1.b")) == ""  # ambiguous: none
    d = decide(Record("7"), cut("n2.cluster.org", 45), NODES, POOL, 3)
    assert d.node == "n2"


def test_a_failure_after_progress_on_another_node_restarts_within_the_budget() -> None:
    record = recovered(Record("7", max_recoveries=2), cut("n1", 45), 0)
    d = decide(record, cut("n2", 90), ("n0", "n2", "n3"), ("n0", "n2", "n3", "n4"), 3)
    assert d.restart and d.node == "n2"
    assert d.history == ("run 0: verdict n1 at step 45: network: link down: rank 1 (n1)",)


def test_a_second_failure_on_another_node_before_progress_stops() -> None:
    record = recovered(Record("7"), cut("n1", 45), 0)
    d = decide(record, cut("n2", 42), ("n0", "n2", "n3"), ("n0", "n2", "n3", "n4"), 3)
    assert not d.restart and "second failure on another node (n2 at step 42, after n1 at " \
        "step 45)" in d.why
    assert len(d.history) == 1 and "n1" in d.history[0]


def test_the_budget_stops_the_next_restart() -> None:
    record = recovered(Record("7", max_recoveries=1), cut("n1", 45), 0)
    d = decide(record, cut("n2", 90), ("n0", "n2", "n3"), ("n0", "n2", "n3", "n4"), 3)
    assert not d.restart and "budget is used up (1 of --max-recoveries 1)" in d.why


def test_a_node_blamed_again_after_it_was_taken_out_stops() -> None:
    record = recovered(Record("7", max_recoveries=5), cut("n1", 45), 0, how="exclude")
    d = decide(record, cut("n1", 90), NODES, POOL, 3)
    assert not d.restart and "blamed again" in d.why


def test_too_few_healthy_nodes_left_stops() -> None:
    d = decide(Record("7"), cut("n1", 45), NODES, ("n0", "n1", "n2"), 3)
    assert not d.restart and "needs 3, 2 (n0, n2) remain without n1" in d.why
    assert d.too_few  # a requeue (the partition's nodes) may still find enough
    record = recovered(Record("7"), cut("n3", 10), 0)
    d = decide(record, cut("n1", 45), NODES, POOL, 3)  # n3 drained before: n0, n2 left
    assert not d.restart and "needs 3, 2 (n0, n2)" in d.why


def test_the_record_round_trips_and_knows_its_run() -> None:
    record = recovered(Record("7"), cut("n1", 45), 0)
    again = Record.from_dict(json.loads(json.dumps(record.to_dict())))
    assert again == record
    assert again.acted_in(0) and not again.acted_in(1)
    assert again.taken_out == ("n1",) and again.recoveries == 1
    assert [e.line() for e in again.events][1:] == [
        "run 0: drain n1: ddpnet: network: link down: rank 1 (n1)", "run 0: requeue",
        "run 1: resumed at step 40"]


def test_other_refusals_are_not_for_want_of_nodes() -> None:
    d = decide(Record("7", (), 0), cut("n1", 45), NODES, POOL, 3)
    assert not d.restart and "budget is used up" in d.why and not d.too_few


def test_a_step_restart_in_the_allocation_counts_against_the_budget() -> None:
    record = Record("7", (Event("verdict", 0, 1.0, "n3", verdict=cut("n3", 10), step=10),
                          Event("drain", 0, 2.0, "n3"), Event("restart", 0, 3.0, "n3")), 1)
    assert record.recoveries == 1 and record.taken_out == ("n3",)
    d = decide(record, cut("n1", 45), NODES, (*POOL, "n4"), 3)
    assert not d.restart and "(1 of --max-recoveries 1)" in d.why


def test_the_steps_nodes_are_the_allocations_first_not_taken_out() -> None:
    allocation = ("n0", "n1", "n2", "n3")
    assert step_nodes(allocation, (), 3) == ("n0", "n1", "n2")
    assert step_nodes(allocation, ("n0",), 3) == ("n1", "n2", "n3")  # a new node 0
    assert step_nodes(allocation, ("n1", "n9"), 3) == ("n0", "n2", "n3")
    assert step_nodes(allocation, ("n1", "n2"), 3) == ()  # no spare left
