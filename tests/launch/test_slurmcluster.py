"""launch.slurmcluster's slurm.conf (pure): what the real daemons started by the SLURM tests
read; their behaviour is tested there (test_slurm, test_slurm_requeue, test_slurm_recover)."""

from __future__ import annotations

from pathlib import Path

from ddpnet.launch.slurmcluster import ClusterSpec, SlurmNode, render_conf


def _spec(**kw: object) -> ClusterSpec:
    return ClusterSpec(cluster="c", root=Path("/r"), controller_host="h",
                       controller_addr="198.18.0.1",
                       nodes=(SlurmNode("n0", "198.18.0.2", "n0"),), **kw)  # type: ignore[arg-type]


def test_the_scheduler_passes_every_few_seconds_not_slurms_minute() -> None:
    conf = render_conf(_spec()).splitlines()
    assert "SchedulerParameters=sched_interval=2,bf_interval=2" in conf
    assert "SchedulerParameters=sched_interval=7,bf_interval=7" in render_conf(
        _spec(sched_interval_s=7)).splitlines()


def test_a_short_credential_lifetime_goes_with_the_munge_socket() -> None:
    conf = render_conf(_spec(cred_expire_s=5)).splitlines()
    assert "AuthInfo=socket=/r/munge/munge.socket,cred_expire=5" in conf
    assert "AuthInfo=socket=/r/munge/munge.socket" in render_conf(_spec()).splitlines()
