"""THE backend/device choice (``process_group.pick_backend``): nccl on cuda, gloo on cpu,
explicit choices win, impossible ones are ConfigErrors; every choice says why."""

from __future__ import annotations

import pytest

from ddpnet.errors import ConfigError
from ddpnet.process_group import BackendChoice, pick_backend


@pytest.mark.parametrize(("backend", "device", "cuda", "nccl", "want"), [
    # auto/auto: the pair follows the hardware
    ("auto", "auto", 0, True, ("gloo", "cpu")),
    ("auto", "auto", 0, False, ("gloo", "cpu")),
    ("auto", "auto", 2, True, ("nccl", "cuda")),
    ("auto", "auto", 2, False, ("gloo", "cpu")),
    # an explicit device decides the backend
    ("auto", "cuda", 1, True, ("nccl", "cuda")),
    ("auto", "cuda", 1, False, ("gloo", "cuda")),
    ("auto", "cpu", 4, True, ("gloo", "cpu")),
    # an explicit backend decides the device
    ("nccl", "auto", 1, True, ("nccl", "cuda")),
    ("gloo", "auto", 8, True, ("gloo", "cpu")),
    # both explicit: both win
    ("gloo", "cuda", 1, True, ("gloo", "cuda")),
    ("gloo", "cpu", 0, False, ("gloo", "cpu")),
])
def test_the_choice(backend: str, device: str, cuda: int, nccl: bool,
                    want: tuple[str, str]) -> None:
    chosen = pick_backend(backend, cuda, nccl, device)
    assert (chosen.backend, chosen.device) == want
    assert chosen.reason and chosen.device_reason  # every choice says why


def test_reasons_name_the_source() -> None:
    assert pick_backend("auto", 2, True) == BackendChoice(
        "nccl", "cuda", "2 CUDA device(s) visible", "2 CUDA device(s) visible")
    explicit = pick_backend("gloo", 0, False, "cpu")
    assert (explicit.reason, explicit.device_reason) == ("argument backend", "argument device")
    assert "NCCL" in pick_backend("auto", 2, False).device_reason
    assert pick_backend("auto", 0, True).reason == "no CUDA device visible"


def test_device_for_a_local_rank() -> None:
    assert pick_backend("auto", 4, True).device_for(3) == "cuda:3"
    assert pick_backend("auto", 0, True).device_for(3) == "cpu"


@pytest.mark.parametrize(("backend", "device", "cuda", "nccl", "needle"), [
    ("mpi", "auto", 0, True, "not one of"),
    ("auto", "tpu", 0, True, "not one of"),
    ("auto", "cuda", 0, True, "no CUDA"),
    ("gloo", "cuda", 0, True, "no CUDA"),
    ("nccl", "auto", 0, True, "no CUDA device"),
    ("nccl", "auto", 2, False, "no NCCL"),
    ("nccl", "cpu", 2, True, "CUDA tensors"),
])
def test_impossible_choices_are_config_errors(backend: str, device: str, cuda: int,
                                              nccl: bool, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle) as info:
        pick_backend(backend, cuda, nccl, device)
    assert info.value.hint


def test_gpu_index_is_the_local_rank_among_the_visible_gpus() -> None:
    from ddpnet.process_group import gpu_index

    assert [gpu_index(r, 2) for r in range(3)] == [0, 1, None]
    assert gpu_index(0, 0) is None and gpu_index(-1, 4) is None


@pytest.mark.parametrize(("flags", "want"), [
    (False, ["use backend='gloo' on CPU-only nodes", "use device='cpu'"]),
    (True, ["use --backend gloo on CPU-only nodes", "use --device cpu"]),
])
def test_hints_speak_the_users_interface(flags: bool, want: list[str]) -> None:
    """A Python caller of ddpnet.init() reads arguments, a CLI user flags (``ddpnet bench
    --backend nccl`` on a CPU node was told ``backend='gloo'``)."""
    from ddpnet import output

    output.speak_flags(flags)
    try:
        hints = []
        for backend, device in (("nccl", "auto"), ("auto", "cuda")):
            with pytest.raises(ConfigError) as err:
                pick_backend(backend, 0, False, device)
            hints.append(err.value.hint)
    finally:
        output.speak_flags(False)
    assert [h.startswith(w) for h, w in zip(hints, want, strict=True)] == [True, True], hints
    assert ("'" in " ".join(hints)) is not flags  # no Python quoting in a flag's hint
