"""``ddpnet lab``'s subcommands without a lab: names, --env, --node, the results' JSON."""

from __future__ import annotations

import pytest

from ddpnet.errors import ConfigError
from ddpnet.lab.ops import (
    DownResult,
    FaultOptions,
    FaultResult,
    RunResult,
    attach,
    fault,
    node_index,
    parse_env,
)


@pytest.mark.parametrize("bad", ["lab\n", "a/b", "../x", "x" * 100, "Lab", ""])
def test_attach_validates_the_name_before_any_file_is_read(bad: str) -> None:
    with pytest.raises(ConfigError, match="bad lab name"):
        attach(bad)


def test_env_pairs() -> None:
    assert parse_env(("A=1", "B=x=y", "C=")) == {"A": "1", "B": "x=y", "C": ""}
    for bad in ("A", "=1"):
        with pytest.raises(ConfigError, match="expected KEY=VALUE"):
            parse_env((bad,))


def test_node_index() -> None:
    assert node_index("2") == 2
    with pytest.raises(ConfigError, match="expected a node index"):
        node_index("all")


def test_unknown_fault_kind_before_the_lab_is_looked_up() -> None:
    with pytest.raises(ConfigError, match="unknown fault kind 'meteor'"):
        fault(FaultOptions("nosuchlab", "meteor", "0"))


def test_results_json_and_exit_codes() -> None:
    run = RunResult("l", {"l-n0": 0, "l-n1": 124, "l-n2": 7}, ("l-n1",))
    assert run.exit_code == 124
    assert run.to_dict() == {"name": "l", "exit_codes": {"l-n0": 0, "l-n1": 124, "l-n2": 7},
                             "timed_out": ["l-n1"]}
    assert RunResult("l").exit_code == 0
    assert FaultResult("l", None, None).to_dict() == {"name": "l", "cleared": "all"}
    assert FaultResult("l", 1, "l-n1").to_dict() == {"name": "l", "cleared": 1}
    rec = {"kind": "loss", "percent": 5.0}
    assert FaultResult("l", 1, "l-n1", rec, (rec,)).to_dict() == {
        "name": "l", "node": 1, "fault": rec, "faults": [rec]}
    assert DownResult("l").to_dict() == {"name": "l", "down": True}


def test_router_options_parse_to_nodes_mode_and_forwards() -> None:
    from ddpnet.lab.ops import UpOptions, parse_forward, router_nodes

    assert router_nodes(UpOptions("x", 4, "198.18.0.0/24", nat="1-2")) == ((1, 2), "nat")
    assert router_nodes(UpOptions("x", 4, "198.18.0.0/24", routed="3")) == ((3,), "routed")
    assert router_nodes(UpOptions("x", 4, "198.18.0.0/24")) == ((), "nat")
    assert parse_forward("29500:0") == (29500, 0)
    for bad, needle in ((UpOptions("x", 4, "s", nat="1", routed="2"), "both given"),
                        (UpOptions("x", 4, "s", nat="all"), "behind the router"),
                        (UpOptions("x", 4, "s", nat="7"), "does not exist")):
        with pytest.raises(ConfigError, match=needle):
            router_nodes(bad)
    for text in ("29500", "a:1", "1:b", ":", "1" * 30 + ":1"):
        with pytest.raises(ConfigError, match="expected PORT:NODE"):
            parse_forward(text)


def test_second_network_options_reach_the_labs_spec() -> None:
    from ddpnet.lab import Lab
    from ddpnet.lab.ops import UpOptions, second_first

    assert second_first(UpOptions("x", 3, "s", second_first="1-2")) == (1, 2)
    assert second_first(UpOptions("x", 3, "s", second_first="all")) == (0, 1, 2)
    assert second_first(UpOptions("x", 3, "s")) == ()
    with pytest.raises(ConfigError, match="node 3 does not exist"):
        second_first(UpOptions("x", 3, "s", second_first="3"))
    # the Python API (what lab tests use): the spec and each node's second address
    lab = Lab(name="qsec", nodes=2, second_net="198.18.2.0/24", second_first=[1],
              second_rate="10gbit")
    assert lab.spec.second_net == "198.18.2.0/24" and lab.spec.second_first == (1,)
    assert [n.second_address for n in lab.nodes] == ["198.18.2.1", "198.18.2.2"]
    status = lab.status()
    assert status["second_net"] == "198.18.2.0/24"
    assert status["nodes"][1]["second_address"] == "198.18.2.2"
    assert status["nodes"][1]["second_shaping"]["rate"] == "10gbit"
    plain = Lab(name="qsec", nodes=1).status()
    assert plain["second_net"] is None and plain["nodes"][0]["second_address"] is None


def test_run_timeout_help_states_the_bound_the_run_enforces() -> None:
    """The help said <=1000000000 while RunOptions refused more than a day."""
    import click

    from ddpnet.cli.lab import run_cmd
    from ddpnet.lab.ops import MAX_RUN_TIMEOUT, RunOptions

    (param,) = [p for p in run_cmd.params if p.name == "timeout"]
    assert isinstance(param.type, click.FloatRange) and param.type.max == MAX_RUN_TIMEOUT
    assert f"{MAX_RUN_TIMEOUT}" in (param.get_help_record(click.Context(run_cmd)) or ("", ""))[1]
    RunOptions(name="lab", argv=("true",), timeout=MAX_RUN_TIMEOUT)
