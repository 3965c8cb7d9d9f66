"""watch.settings: the watch's settings from the arguments, else the environment."""

from __future__ import annotations

import pytest

from ddpnet.errors import ConfigError
from ddpnet.watch.settings import watch_config


def test_the_metrics_settings_come_from_the_argument_else_the_environment() -> None:
    env = {"DDPNET_METRICS_PORT": "9464", "SLURM_JOB_ID": "77", "DDPNET_METRICS_PROBE_S": "30",
           "DDPNET_METRICS_LINGER_S": "20"}
    wc = watch_config(env)
    assert (wc.metrics_port, wc.probe_every, wc.job_id, wc.metrics_linger) == \
        (9464, 30.0, "77", 20.0)
    assert watch_config({}).metrics_linger == 60.0
    assert watch_config(env, metrics_port=9500).metrics_port == 9500
    assert watch_config({}).metrics_port is None and watch_config({}).job_id == ""
    assert watch_config({"TORCHELASTIC_RUN_ID": "none"}).job_id == ""  # torchrun's default
    assert watch_config({"DDPNET_JOB_ID": "a", "SLURM_JOB_ID": "b"}).job_id == "a"
    for bad in ({"DDPNET_METRICS_PORT": "http"}, {"DDPNET_METRICS_PORT": "70000"},
                {"DDPNET_METRICS_PROBE_S": "-1"}, {"DDPNET_METRICS_PROBE_S": "nan"},
                {"DDPNET_METRICS_LINGER_S": "soon"}, {"DDPNET_METRICS_LINGER_S": "7200"}):
        with pytest.raises(ConfigError):
            watch_config(bad)
