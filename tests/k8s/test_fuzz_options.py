"""Property-based: ``ddpnet k8s`` options are refused with one clean ConfigError (exit 2) or
render objects that the official models accept unchanged and whose YAML loads back."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from ddpnet.k8s.models import problems
from ddpnet.k8s.options import K8sOptions
from ddpnet.k8s.render import render, to_yaml
from ddpnet.launch.command import Target
from tests.fuzzing import FUZZ, clean, text

pytest.importorskip("kubeflow.training", reason="pip install 'ddpnet[k8s]'")

_label = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)
_quantity = st.from_regex(r"[1-9][0-9]{0,3}(\.[0-9])?(Ki|Mi|Gi|Ti|k|M|G)?", fullmatch=True)
_iface = st.from_regex(r"[A-Za-z0-9_.@\-]{1,15}", fullmatch=True)
_args = st.lists(st.one_of(text, st.just("$(HOME)"), st.just("--lr")), max_size=4)
_kind = st.sampled_from(["pytorchjob", "jobset"])


def _valid(opts: K8sOptions) -> None:
    objects = render(opts)
    assert problems(objects) == []
    assert tuple(yaml.safe_load_all(to_yaml(objects))) == objects


@FUZZ
@given(st.integers(1, 300), st.integers(0, 16), _label, st.one_of(st.none(), _label),
       _quantity, _iface, _kind, st.booleans(), st.integers(1, 65535), _args)
def test_accepted_values_render_objects_the_models_accept(
        nodes: int, gpus: int, name: str, namespace: str | None, shm: str, iface: str,
        kind: str, check: bool, port: int, args: list[str]) -> None:
    opts = clean(K8sOptions, Target("train.py", tuple(args)), nodes, gpus, "img:1", name=name,
                 namespace=namespace, shm_size=shm, iface=iface, kind=kind, check=check,
                 master_port=port)
    if opts is not None:  # only a name too long for its derived pod names is refused here
        _valid(opts)


@FUZZ
@given(st.one_of(st.integers(-2, 200_000), st.just(2)), st.one_of(st.integers(-2, 2000),
       st.just(1)), st.one_of(text, _label), st.one_of(st.none(), text), st.one_of(text, _quantity),
       st.one_of(text, _iface), st.sampled_from(["pytorchjob", "jobset", "", "mpijob"]))
def test_any_values_render_valid_objects_or_fail_cleanly(
        nodes: int, gpus: int, name: str, namespace: str | None, shm: str, iface: str,
        kind: str) -> None:
    kw: dict[str, Any] = {"name": name, "namespace": namespace, "shm_size": shm,
                          "iface": iface, "kind": kind}
    opts = clean(K8sOptions, Target("train.py"), nodes, gpus, "img:1", **kw)
    if opts is not None:
        _valid(opts)
