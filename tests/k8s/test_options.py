"""Every flag is checked before rendering: one ConfigError naming the flag, with the fix."""

from __future__ import annotations

from typing import Any

import pytest

from ddpnet.errors import ConfigError
from ddpnet.k8s.options import K8sOptions
from ddpnet.launch.command import Target


def build(**kw: Any) -> K8sOptions:
    base: dict[str, Any] = {"target": Target.parse(["train.py"]), "nodes": 2,
                            "gpus_per_node": 1, "image": "img:1"}
    return K8sOptions(**{**base, **kw})


@pytest.mark.parametrize(("kw", "needle"), [
    ({"nodes": 0}, "--nodes 0"),
    ({"nodes": 100_001}, "--nodes 100001"),
    ({"gpus_per_node": -1}, "--gpus-per-node -1"),
    ({"gpus_per_node": 5000}, "--gpus-per-node 5000"),
    ({"image": ""}, "--image ''"),
    ({"image": "my image"}, "--image 'my image'"),
    ({"python": ""}, "--python ''"),
    ({"name": "Train"}, "not a DNS label"),
    ({"name": "train_gpt"}, "not a DNS label"),
    ({"name": "-train"}, "not a DNS label"),
    ({"name": "train-"}, "not a DNS label"),
    ({"name": "a" * 64}, "not a DNS label"),
    ({"name": ""}, "not a DNS label"),
    ({"namespace": "ML"}, "--namespace 'ML'"),
    ({"namespace": "a.b"}, "--namespace 'a.b'"),
    ({"shm_size": "8GB"}, "--shm-size '8GB'"),
    ({"shm_size": "-1Gi"}, "--shm-size '-1Gi'"),
    ({"shm_size": "0"}, "--shm-size '0'"),
    ({"shm_size": ""}, "--shm-size ''"),
    ({"iface": ""}, "--iface ''"),
    ({"iface": "eth0:1"}, "--iface 'eth0:1'"),
    ({"iface": "a" * 16}, "--iface"),
    ({"iface": "^lo"}, "--iface '^lo'"),
    ({"kind": "mpijob"}, "--kind 'mpijob'"),
    ({"check_timeout": 0}, "--check-timeout 0"),
    ({"check_timeout": 3601}, "--check-timeout 3601"),
    ({"master_port": 0}, "--master-port 0"),
    ({"master_port": 65536}, "--master-port 65536"),
])
def test_bad_flags_are_one_config_error(kw: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        build(**kw)
    assert needle in str(err.value)
    assert err.value.hint
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("kind", "longest"), [("pytorchjob", 54), ("jobset", 54)])
def test_names_derived_from_name_must_stay_dns_labels(kind: str, longest: int) -> None:
    # 10 nodes: "<name>-worker-8" and "<name>-node-0-9" are 9 characters longer
    build(kind=kind, nodes=10, name="a" * longest)
    with pytest.raises(ConfigError) as err:
        build(kind=kind, nodes=10, name="a" * (longest + 1))
    assert f"shorten --name to at most {longest} characters" in err.value.hint


def test_worker_names_grow_with_the_node_count() -> None:
    # "<name>-worker-99997" is 13 characters longer than the name; "<name>-master-0" 9
    build(nodes=99_999, name="a" * 50)
    with pytest.raises(ConfigError):
        build(nodes=99_999, name="a" * 51)
    build(nodes=1, name="a" * 54)
    with pytest.raises(ConfigError):
        build(nodes=1, name="a" * 55)


@pytest.mark.parametrize("size", ["8Gi", "512Mi", "1G", "1.5Gi", "100000", "64k"])
def test_quantities_kubernetes_accepts_are_accepted(size: str) -> None:
    assert build(shm_size=size).shm_size == size


def test_good_names_and_interfaces_pass() -> None:
    o = build(name="gpt-2", namespace="team-a", iface="net1", kind="jobset")
    assert (o.name, o.namespace, o.iface) == ("gpt-2", "team-a", "net1")
