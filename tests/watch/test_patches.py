"""Every torch callable the watch wraps keeps its exact signature and is called every way
torch's own signature allows: real torch, a one-rank gloo group, the watch's patches installed
as a rank's session installs them (``infer.install``, ``Recorder.wrap_collectives``,
``dying.note_exits``, ``attach.patch``). The installed torch is the version checked: each
supported version's CI runs this module against its own torch."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.distributed.fsdp  # imported before the watch starts, as scripts do
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

from ddpnet.net.ports import free_port
from ddpnet.watch import attach, dying, infer, patches
from ddpnet.watch.recorder import Recorder

#: where each target's holders live, for the snapshot of what the watch changed
HOLDERS: dict[str, Callable[[], Any]] = {
    "torch.distributed": lambda: dist,
    "torch.distributed.distributed_c10d": lambda: dist.distributed_c10d,
    "torch.nn.parallel.DistributedDataParallel": lambda: DDP,
    f"{patches.FSDP_MODULE}.FullyShardedDataParallel": lambda: FSDP,
    f"{patches.FSDP2_STATE}.FSDPState": lambda: sys.modules[patches.FSDP2_STATE].FSDPState,
    "torch.utils.data.dataloader._BaseDataLoaderIter":
        lambda: torch.utils.data.dataloader._BaseDataLoaderIter,
    "sys": lambda: sys,
}


def _snapshot() -> dict[str, int]:
    """id of every callable each holder has as its own (a class's ``vars``, a module's)."""
    out = {}
    for name, holder in HOLDERS.items():
        owner = holder()
        for attribute, value in list(vars(owner).items()):
            if callable(value):
                out[f"{name}.{attribute}"] = id(value)
    return out


class Watched:
    """The watch's patches on this process, as a rank's session installs them."""

    def __init__(self) -> None:
        self.rec = Recorder()
        self.announced: list[str] = []
        self.records: list[Any] = []
        self.rec.announce = self.note
        self.exits: list[str] = []
        self.before = _snapshot()
        self.init_holders = {m: m.init_process_group for m in (
            dist, dist.distributed_c10d, sys.modules["torch.distributed.device_mesh"])}
        self.undos = [self.rec.wrap_collectives(dist, lambda: len(self.announced) + 1),
                      infer.install(self.rec),
                      dying.note_exits(lambda error, _exc: self.exits.append(error))]
        assert attach.patch()
        self.after = _snapshot()

    def note(self, record: Any) -> None:
        self.announced.append(record.op)
        self.records.append(record)

    def undo(self) -> None:
        for undo in reversed(self.undos):
            undo()
        for module, original in self.init_holders.items():
            module.init_process_group = original  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def group() -> Iterator[None]:
    """A one-rank gloo group (DDP, FSDP and the collectives need one), brought up before the
    watch as a script's own would be."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def watched(group: None) -> Iterator[Watched]:
    w = Watched()
    yield w
    w.undo()


def test_the_watch_wraps_exactly_the_listed_targets(watched: Watched) -> None:
    changed = {k for k, v in watched.after.items() if watched.before.get(k) != v}
    listed = {t.name for t in patches.TARGETS}
    # init_process_group is listed once, for the c10d module that defines it; the holders
    # that re-export it (torch.distributed) carry the same wrapper
    assert changed - {"torch.distributed.init_process_group"} == listed


@pytest.mark.parametrize("target", patches.TARGETS, ids=lambda t: t.name)
def test_each_wrapper_keeps_the_originals_signature_and_name(watched: Watched,
                                                             target: patches.Target) -> None:
    where = patches.resolve(target)
    assert where is not None, f"torch {torch.__version__} has no {target.name}"
    raw = patches._raw(*where)
    assert patches.is_patched(raw)
    original = raw.__wrapped__
    assert inspect.signature(raw) == inspect.signature(original)
    for attribute in ("__name__", "__qualname__", "__doc__", "__module__"):
        assert getattr(raw, attribute) == getattr(original, attribute)
    bound = getattr(*where)  # as a caller sees it: bound to the class where it is a method
    assert inspect.signature(bound) == inspect.signature(
        original.__get__(None, where[0]) if isinstance(where[0], type) else original)


def test_a_module_class_keeps_its_signature(watched: Watched) -> None:
    """``inspect.signature(DDP)`` (what config systems such as Lightning's CLI and hydra read)
    is the constructor's, as unwatched."""
    init = patches._raw(DDP, "__init__")
    assert patches.is_patched(init)
    expected = inspect.signature(init.__wrapped__)
    params = list(expected.parameters.values())[1:]
    assert inspect.signature(DDP) == expected.replace(parameters=params)


# -- every way to call ---------------------------------------------------------------------

def forms(function: Callable[..., Any], values: dict[str, Any]
          ) -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
    """The calls ``function``'s signature allows with ``values`` (by parameter name): all by
    position where it can be, all by keyword where it can be (the first parameter too),
    half and half, and leaving out the arguments equal to their default."""
    params = [p for p in inspect.signature(function).parameters.values() if p.name != "self"]
    chosen = [p for p in params if p.name in values]

    def split(keyword_from: int, only: list[inspect.Parameter]
              ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for p in only:
            at = params.index(p)  # by position only while no parameter before it was skipped
            if p.kind == p.POSITIONAL_ONLY or (p.kind == p.POSITIONAL_OR_KEYWORD and
                                               at == len(args) and at < keyword_from):
                args.append(values[p.name])
            else:
                kwargs[p.name] = values[p.name]
        return tuple(args), kwargs

    given = [p for p in chosen if not _is_default(values[p.name], p.default)]
    return [("positional", *split(len(params), chosen)),
            ("keyword", *split(0, chosen)),
            ("half and half", *split(len(chosen) // 2, chosen)),
            ("defaults left out", *split(len(params), given))]


def _is_default(value: object, default: object) -> bool:
    return value is default or (type(value) is type(default) and
                                isinstance(value, (bool, int, float, str)) and value == default)


def test_forms_cover_each_convention() -> None:
    def f(a: int, /, b: int, c: int = 3, *, d: int = 4) -> None: ...

    got = {name: (args, kwargs) for name, args, kwargs in
           forms(f, {"a": 1, "b": 2, "c": 3, "d": 4})}
    assert got == {"positional": ((1, 2, 3), {"d": 4}),
                   "keyword": ((1,), {"b": 2, "c": 3, "d": 4}),
                   "half and half": ((1, 2), {"c": 3, "d": 4}),
                   "defaults left out": ((1, 2), {})}

    def g(out: int, inp: int, sizes: None = None, group: None = None) -> None: ...

    by_name = {name: (args, kwargs) for name, args, kwargs in
               forms(g, {"out": 1, "inp": 2, "group": 7})}
    assert by_name["positional"] == ((1, 2), {"group": 7})  # never group in sizes' place
    assert by_name["keyword"] == ((), {"out": 1, "inp": 2, "group": 7})


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)  # type: ignore[no-any-return]


class LightningStyleDDP(DDP):
    """A subclass whose ``__init__`` calls the base class's by keyword (as trainers do)."""

    def __init__(self, model: torch.nn.Module, **kwargs: Any) -> None:
        super().__init__(module=model, **kwargs)


def _ddp_values() -> dict[str, Any]:
    return {"module": Net(), "device_ids": None, "output_device": None, "dim": 0,
            "broadcast_buffers": True}


@pytest.mark.parametrize("cls", [DDP, LightningStyleDDP])
def test_ddp_built_every_way_is_a_watched_ddp(watched: Watched, cls: type) -> None:
    values = _ddp_values()
    calls = forms(patches._raw(DDP, "__init__").__wrapped__, values)
    if cls is LightningStyleDDP:
        calls = [("subclass", (Net(),), {"broadcast_buffers": True})]
    for how, args, kwargs in calls:
        watched.rec.phase = ""
        wrapped = cls(*args, **kwargs)
        assert isinstance(wrapped.module, Net), how
        assert wrapped.broadcast_buffers, how
        wrapped(torch.ones(1, 4))  # our forward hooks were registered on it
        assert watched.rec.phase in ("forward", "backward"), how


def test_fsdp_and_fully_shard_built_every_way_are_watched(watched: Watched) -> None:
    for how, args, kwargs in forms(patches._raw(FSDP, "__init__").__wrapped__,
                                   {"module": Net(), "device_id": torch.device("cpu")}):
        watched.rec.phase = ""
        FSDP(*args, **kwargs)(torch.ones(1, 4)).sum().backward()
        assert watched.rec.phase == "backward", how
    model = fully_shard(Net())
    watched.rec.phase = ""
    model(torch.ones(1, 4))
    assert watched.rec.phase == "backward"


#: a value for each collective's parameters on a one-rank group
def _collective_values(name: str) -> dict[str, Any]:
    t = torch.ones(3)
    common = {"group": None, "async_op": False}
    return {
        "all_reduce": {"tensor": t, "op": dist.ReduceOp.SUM, **common},
        "broadcast": {"tensor": t, "src": 0, **common},
        "all_gather": {"tensor_list": [torch.zeros(3)], "tensor": t, **common},
        "all_gather_into_tensor": {"output_tensor": torch.zeros(3), "input_tensor": t,
                                   **common},
        "reduce_scatter_tensor": {"output": torch.zeros(3), "input": t,
                                  "op": dist.ReduceOp.SUM, **common},
        "reduce": {"tensor": t, "dst": 0, "op": dist.ReduceOp.SUM, **common},
        "barrier": {**common},
        "all_to_all_single": {"output": torch.zeros(3), "input": t, **common},
    }[name]


@pytest.mark.parametrize("name", patches.COLLECTIVES)
def test_each_collective_called_every_way_runs_and_is_announced(watched: Watched,
                                                                name: str) -> None:
    wrapped = getattr(dist, name)
    original = wrapped.__wrapped__
    for how, args, kwargs in forms(original, _collective_values(name)):
        before = len(watched.announced)
        work = wrapped(*args, **kwargs)
        assert work is None or work.wait(), how
        assert watched.announced[before:] == [name], how
        if name != "barrier":  # its tensor, however it was passed (DeepSpeed: by keyword)
            record = watched.records[-1]
            assert (record.dtype, record.shape) == ("float32", (3,)), (how, record)
    _how, args, kwargs = forms(original, {**_collective_values(name), "async_op": True})[0]
    before = len(watched.announced)
    assert wrapped(*args, **kwargs).wait()  # async_op by position: a Work to wait on
    assert watched.announced[before:] == [name]


def test_another_groups_collective_by_position_is_passed_on_unannounced(
        watched: Watched) -> None:
    sub = dist.new_group([0])
    before = len(watched.announced)
    t = torch.ones(2)
    dist.all_reduce(t, dist.ReduceOp.SUM, sub)
    dist.all_reduce(t, group=sub)
    assert len(watched.announced) == before and t.tolist() == [1.0, 1.0]


def test_the_data_loader_iterator_every_way(watched: Watched) -> None:
    loader = DataLoader(list(range(6)), batch_size=2)
    it = iter(loader)
    watched.rec.phase = ""
    assert next(it).tolist() == [0, 1]
    assert watched.rec.phase == "data"
    assert it.__next__().tolist() == [2, 3]
    assert type(it).__next__(it).tolist() == [4, 5]
    with pytest.raises(StopIteration):
        next(it)


@pytest.mark.parametrize("args, code", [((), None), ((0,), 0), ((3,), 3), (("bye",), "bye")])
def test_sys_exit_every_way_exits_as_unwatched(watched: Watched, args: tuple[Any, ...],
                                               code: object) -> None:
    with pytest.raises(SystemExit) as exited:
        sys.exit(*args)
    assert exited.value.code == code
    with pytest.raises(TypeError):  # positional-only, watched or not
        sys.exit(status=1)  # type: ignore[call-arg]


def test_init_process_group_every_way_as_unwatched(watched: Watched) -> None:
    """A world of one: the watch has nothing to start and the call is the user's. (The
    watched cases, world > 1, run in the lab: tests/watch/test_trainers_lab.py.)"""
    assert patches.is_patched(dist.init_process_group)
    original = dist.init_process_group.__wrapped__
    dist.destroy_process_group()
    try:
        for how, _args, _kwargs in forms(original, {
                "backend": "gloo", "init_method": "", "world_size": 1, "rank": 0}):
            # a fresh port each time: the form's init_method replaced, where it stands
            args = tuple(f"tcp://127.0.0.1:{free_port()}" if a == "" else a for a in _args)
            kwargs = {k: f"tcp://127.0.0.1:{free_port()}" if v == "" else v
                      for k, v in _kwargs.items()}
            dist.init_process_group(*args, **kwargs)
            assert dist.get_world_size() == 1, how
            dist.destroy_process_group()
    finally:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}",
                                rank=0, world_size=1)


# -- a failing hook of ours --------------------------------------------------------------

def test_a_failing_hook_lets_the_call_run_unwatched_and_says_so_once(
        group: None, capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[str] = []

    class Holder:
        def method(self, first: int, *, second: int = 2) -> tuple[int, int]:
            """Doc."""
            calls.append("ran")
            return first, second

    def broken(*_args: object) -> None:
        raise KeyError("ours")

    guard = patches.Warns("lost something", "a hint")
    undo = patches.wrap(Holder, "method", guard, before=broken, after=broken)
    h = Holder()
    assert h.method(first=1) == (1, 2) and h.method(1, second=5) == (1, 5)
    assert calls == ["ran", "ran"]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ddpnet: warning: watch: lost something")
    assert "KeyError" in err and "hint: a hint" in err
    undo()
    assert Holder.method.__name__ == "method" and not patches.is_patched(
        vars(Holder)["method"])


def test_an_error_of_the_call_itself_is_the_callers(group: None) -> None:
    with pytest.raises(ValueError, match="theirs"):
        holder = type("H", (), {"f": staticmethod(lambda: (_ for _ in ()).throw(
            ValueError("theirs")))})
        patches.wrap(holder, "f", patches.Warns("x", "y"))
        holder.f()


def test_undo_puts_back_what_was_there_even_when_inherited() -> None:
    class Base:
        def __init__(self, module: object) -> None:
            self.module = module

    class Child(Base):
        pass

    seen: list[object] = []
    undo = patches.wrap(Child, "__init__", patches.Warns("x", "y"),
                        after=lambda inst, *_: seen.append(inst))
    child = Child(module=1)
    assert seen == [child] and child.module == 1
    undo()
    assert "__init__" not in vars(Child) and Child(module=2).module == 2
    assert seen == [child]


def test_a_wrapper_wrapped_again_by_another_library_is_left_in_place() -> None:
    import wrapt

    class Holder:
        def f(self, x: int) -> int:
            return x

    seen: list[int] = []
    undo = patches.wrap(Holder, "f", patches.Warns("x", "y"),
                        before=lambda _i, args, kwargs: seen.append(1))
    theirs = wrapt.FunctionWrapper(vars(Holder)["f"], lambda w, i, a, k: w(*a, **k) + 1)
    Holder.f = theirs  # type: ignore[method-assign]
    undo()
    assert vars(Holder)["f"] is theirs and Holder().f(x=1) == 2
    assert seen == []  # ours, still under theirs, passes the call through
