"""``ddpnet launch``'s options to plan: flag conflicts, --local, the dry-run JSON object."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpnet.env.jobport import read_port_range
from ddpnet.errors import ConfigError
from ddpnet.launch.run import LaunchOptions, LaunchPlan, prepare, run

SCRIPT = ("--", "train.py", "--lr", "0.1")


def _opts(**kw: object) -> LaunchOptions:
    return LaunchOptions(program=SCRIPT, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("kw", "needle"), [
    ({"as_json": True, "dry_run": False}, "needs --dry-run"),
    ({"local": 0}, "need at least 1 rank"),
    ({"local": 65}, "more than 64 ranks"),
    ({"local": 2, "nnodes": "2"}, "this machine only"),
    ({"hosts": "n0:2"}, "--hosts is for --via mpirun"),
    ({"via": "mpirun", "node_rank": "1"}, "--node-rank does not apply"),
    ({"via": "mpirun", "max_restarts": 2}, "--max-restarts does not apply"),
    ({"via": "mpirun", "hosts": "n0:2,n1:2", "nnodes": "3"}, "contradicts the 2 hosts"),
    ({"nnodes": "2", "node_rank": "2"}, "outside 0..1"),
])
def test_conflicting_flags_are_config_errors(kw: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        prepare(_opts(**{"dry_run": True, **kw}), environ={})


def test_batch_step_of_a_multi_node_job_is_refused() -> None:
    env = {"SLURM_JOB_ID": "7", "SLURM_PROCID": "0", "SLURM_JOB_NUM_NODES": "2",
           "SLURM_NODELIST": "n[1-2]"}
    with pytest.raises(ConfigError, match="only this node would train"):
        prepare(_opts(dry_run=True), environ=env)


def test_job_script_of_a_multi_node_pbs_job_is_refused_with_the_fan_out(tmp_path: Path) -> None:
    nodefile = tmp_path / "nodes"
    nodefile.write_text("n1\nn1\nn2\nn2\n")
    env = {"PBS_JOBID": "9.srv", "PBS_NODEFILE": str(nodefile), "PBS_TASKNUM": "1",
           "PBS_NODENUM": "0"}
    with pytest.raises(ConfigError, match=r"job script of a 2-node pbs job 9\.srv") as err:
        prepare(_opts(dry_run=True), environ=env)
    assert "pbsdsh -u -- bash -lc 'torchrun --nnodes 2 --nproc-per-node 2" in err.value.hint


def test_local_dry_run_is_one_node_on_loopback_ignoring_slurm() -> None:
    plan = prepare(_opts(local=2, dry_run=True, ifname="lo"),
                   environ={"SLURM_JOB_ID": "7", "SLURM_NNODES": "4"})
    assert plan.engine == "torchrun" and plan.dry_run and plan.argv == ()
    (node,) = plan.nodes
    assert node["ranks"] == [0, 1] and "--nproc-per-node 2" in node["command"]
    assert "127.0.0.1" in node["command"] and node["env"]["GLOO_SOCKET_IFNAME"] == "lo"
    assert run(plan) is plan
    obj = plan.to_dict()
    assert set(obj) == {"engine", "nodes", "sources", "notes", "warnings"}
    assert obj["sources"]["nproc_per_node"] == "--nproc-per-node"


def test_local_picks_a_free_port_unless_given() -> None:
    """Two local launches side by side never share torchrun's 29500."""
    def port(plan: LaunchPlan) -> int:
        argv = plan.nodes[0]["argv"]
        return int(argv[argv.index("--master-port") + 1])

    env = {"MASTER_PORT": "29500"}
    first, second = (prepare(_opts(local=2, dry_run=True), environ=env) for _ in range(2))
    low, high = read_port_range()
    assert low <= port(first) <= high and low <= port(second) <= high
    assert port(prepare(_opts(local=2, dry_run=True, master_port="29511"), environ=env)) == 29511


def test_max_restarts_picks_c10d_with_a_note() -> None:
    plan = prepare(_opts(max_restarts=2, dry_run=True, ifname="lo"), environ={})
    assert any("rendezvous c10d" in n for n in plan.notes)
    assert "c10d" in plan.nodes[0]["command"]


def test_mpirun_plan_counts_slots_and_warns_on_another_master() -> None:
    plan = prepare(_opts(via="mpirun", hosts="n0:4,n1:4", master_addr="n1", ifname="eth0",
                         dry_run=True), environ={})
    assert isinstance(plan, LaunchPlan) and plan.engine == "mpirun"
    assert plan.nodes[0]["ranks"] == list(range(8)) and plan.sources == {"interface": "--iface"}
    assert plan.warnings and "not the first host of --hosts" in plan.warnings[0]


def test_torchrun_handles_slurms_warning_signal_unless_the_user_chose(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hand-written `ddpnet launch` in a `--signal=USR1@90` job: torchrun must pass SIGUSR1
    on to its ranks (they checkpoint) instead of dying of it; a user's own choice stays."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")  # the script must exist before anything starts
    plan = prepare(_opts(local=2, ifname="lo"), environ={})
    assert plan.env["TORCHELASTIC_SIGNALS_TO_HANDLE"] == "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"
    mine = prepare(_opts(local=2, ifname="lo"),
                   environ={"TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM"})
    assert "TORCHELASTIC_SIGNALS_TO_HANDLE" not in mine.env  # the user's value is inherited


@pytest.mark.parametrize("via", ["torchrun", "mpirun"])
def test_the_watch_is_attached_to_every_rank_unless_no_watch(via: str) -> None:
    """What --dry-run shows is what the ranks get: the boot dir first on the user's
    PYTHONPATH and the hook's variable, or with --no-watch DDPNET_WATCH=0 and no hook."""
    from ddpnet.watch.attach import ATTACH_VAR, BOOT_DIR

    environ = {"PYTHONPATH": "/mine"}
    where: dict[str, object] = {"local": 2} if via == "torchrun" else {"hosts": "n0:2"}
    on = prepare(_opts(**where, via=via, dry_run=True, ifname="lo"), environ=environ)
    env, command = on.nodes[0]["env"], on.nodes[0]["command"]
    assert env[ATTACH_VAR] == "1" and env["PYTHONPATH"] == f"{BOOT_DIR}:/mine"
    assert f"{ATTACH_VAR}=1" in command and "DDPNET_WATCH=0" not in command
    if via == "mpirun":
        assert f"-x {ATTACH_VAR}" in command and "-x PYTHONPATH" in command
    off = prepare(_opts(**where, via=via, dry_run=True, ifname="lo", watch=False),
                  environ=environ)
    env = off.nodes[0]["env"]
    assert env["DDPNET_WATCH"] == "0" and ATTACH_VAR not in env and "PYTHONPATH" not in env


@pytest.mark.parametrize("via", ["torchrun", "mpirun"])
def test_metrics_port_reaches_every_rank_and_needs_the_watch(via: str) -> None:
    """--metrics-port is DDPNET_METRICS_PORT in every rank's environment (rank 0's hub reads
    it); with --no-watch there is no hub to serve it: a config error, not silence."""
    from ddpnet.errors import ConfigError

    where: dict[str, object] = {"local": 2} if via == "torchrun" else {"hosts": "n0:2"}
    plan = prepare(_opts(**where, via=via, dry_run=True, ifname="lo", metrics_port=9464),
                   environ={})
    assert plan.nodes[0]["env"]["DDPNET_METRICS_PORT"] == "9464"
    assert "DDPNET_METRICS_PORT=9464" in plan.nodes[0]["command"]
    with pytest.raises(ConfigError, match="--metrics-port 9464 needs the watch"):
        prepare(_opts(**where, via=via, dry_run=True, ifname="lo", watch=False,
                      metrics_port=9464), environ={})


def test_mpirun_as_root_needs_its_flag_said_before_it_starts() -> None:
    from ddpnet.launch.run import refuse_root_mpirun

    with pytest.raises(ConfigError, match="refuses to run as root") as err:
        refuse_root_mpirun(False, {}, 0)
    assert err.value.hint.startswith("add --allow-run-as-root")
    refuse_root_mpirun(True, {}, 0)
    refuse_root_mpirun(False, {"OMPI_ALLOW_RUN_AS_ROOT": "1",
                               "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}, 0)
    refuse_root_mpirun(False, {}, 1000)
