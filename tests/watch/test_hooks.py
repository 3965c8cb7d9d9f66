"""watch.hooks: every process-level hook the watch installs is listed, with what it
touches; a hook installed anywhere else in watch/ fails here."""

from __future__ import annotations

import ast
from pathlib import Path

from ddpnet.watch import hooks, patches

WATCH = Path(hooks.__file__).resolve().parent
#: the call (or assignment target) by which each kind of hook is installed
CALLS = {"sys.meta_path.insert": "sys.meta_path", "sys.meta_path.append": "sys.meta_path",
         "atexit.register": "atexit.register", "signal.signal": "signal.signal",
         "os.register_at_fork": "os.register_at_fork",
         "optim.register_optimizer_step_pre_hook": "register_optimizer_step",
         "optim.register_optimizer_step_post_hook": "register_optimizer_step",
         "wrapt.FunctionWrapper": "wrapt.FunctionWrapper"}


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else ""


def installed() -> set[tuple[str, str]]:
    """(module, kind) of every hook-installing call, assignment or wrapper class in
    watch/'s source."""
    found = set()
    for path in WATCH.rglob("*.py"):
        module = "ddpnet." + ".".join(path.relative_to(WATCH.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and _dotted(node.func) in CALLS:
                found.add((module, CALLS[_dotted(node.func)]))
            if isinstance(node, ast.ClassDef) and any(  # a wrapper class
                    _dotted(getattr(b, "value", b)) in CALLS for b in node.bases):
                found.add((module, "wrapt.FunctionWrapper"))
            if isinstance(node, ast.Assign) and any(
                    _dotted(t) == "sys.excepthook" for t in node.targets):
                found.add((module, "sys.excepthook"))
    return found


def test_every_hook_installed_in_the_watch_is_listed() -> None:
    listed = {(h.module, h.kind) for h in hooks.HOOKS if h.kind != "sitecustomize"}
    assert installed() == listed


def test_each_hook_says_what_it_touches_and_what_a_change_costs() -> None:
    assert len({h.name for h in hooks.HOOKS}) == len(hooks.HOOKS)
    for hook in hooks.HOOKS:
        assert hook.touches and hook.if_changed, hook


def test_the_wrapped_callables_are_patches_targets() -> None:
    wrapped = next(h for h in hooks.HOOKS if h.kind == "wrapt.FunctionWrapper")
    assert "patches.TARGETS" in wrapped.touches and patches.TARGETS


def test_the_start_up_file_is_where_it_is_listed() -> None:
    boot = next(h for h in hooks.HOOKS if h.kind == "sitecustomize")
    assert (WATCH.parent / Path(*boot.module.split(".")[1:])).with_suffix(".py").is_file()


def test_docs_list_every_hook() -> None:
    text = (WATCH.parents[2] / "docs" / "watch.md").read_text()
    assert [h.name for h in hooks.HOOKS if f"| {h.name} |" not in text] == []
