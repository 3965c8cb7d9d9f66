"""The architecture holds: every module imports only from its own floor or below
(docs/architecture.md), command packages import each other without cycles, and cli/ stays a
thin layer (no subprocess, socket or file writes)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "ddpnet"

#: floor of each top-level module or package, from the ground up
FLOORS: dict[str, int] = {
    "errors": 0, "exitcodes": 0, "config": 0, "output": 0, "subproc": 0,
    "sysctl_profile": 0, "paths": 0, "address": 0, "__init__": 0,
    "env": 1,
    "net": 2,
    "process_group": 3, "local": 3, "rendezvous": 3, "watch": 3,
    "doctor": 4, "check": 4, "bench": 4, "tune": 4, "launch": 4, "train": 4, "monitor": 4,
    "lab": 4, "k8s": 4, "diagnose": 4,
    "cli": 5, "__main__": 5, "attach": 5,
}


def _top(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py")


def _imports(path: Path) -> set[str]:
    """Top-level ddpnet names this module imports (at any depth: lazy imports count)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] == "ddpnet":
                if len(parts) > 1:
                    out.add(parts[1])
                else:  # from ddpnet import x
                    out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "ddpnet" and len(parts) > 1:
                    out.add(parts[1])
    return out


def _modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py"))


def test_every_top_level_module_has_a_floor() -> None:
    tops = {_top(p) for p in _modules()}
    assert tops <= set(FLOORS), f"give these a floor in FLOORS: {sorted(tops - set(FLOORS))}"


def test_no_module_imports_from_a_floor_above_it() -> None:
    upward = []
    for path in _modules():
        own = FLOORS[_top(path)]
        for name in _imports(path):
            if name in FLOORS and FLOORS[name] > own:
                upward.append(f"{path.relative_to(SRC)} imports ddpnet.{name} "
                              f"(floor {FLOORS[name]} > {own})")
    assert not upward, "\n".join(upward)


def test_command_packages_import_each_other_without_cycles() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for path in _modules():
        top = _top(path)
        for name in _imports(path):
            if name != top and FLOORS.get(name) == FLOORS[top]:
                graph[top].add(name)

    def cycle_from(node: str, trail: tuple[str, ...]) -> tuple[str, ...] | None:
        if node in trail:
            return (*trail[trail.index(node):], node)
        for nxt in sorted(graph[node]):
            found = cycle_from(nxt, (*trail, node))
            if found:
                return found
        return None

    for start in sorted(graph):
        found = cycle_from(start, ())
        assert found is None, " -> ".join(found)


def test_cli_only_parses() -> None:
    """No subprocess, socket or file writes in cli/, and every module stays short."""
    banned = {"subprocess", "socket"}
    for path in sorted((SRC / "cli").glob("*.py")):
        tree = ast.parse(path.read_text())
        names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                 for a in n.names}
        names |= {n.module.split(".")[0] for n in ast.walk(tree)
                  if isinstance(n, ast.ImportFrom) and n.module}
        assert not names & banned, f"{path.name} imports {sorted(names & banned)}"
        calls = {n.func.attr for n in ast.walk(tree)
                 if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
        assert not calls & {"write_text", "write_bytes", "unlink", "mkdir"}, path.name
        assert len(path.read_text().splitlines()) <= 150, f"{path.name} is not thin"


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _module_imports(path: Path, known: set[str]) -> set[str]:
    """The ddpnet modules this file imports, at any depth and under TYPE_CHECKING too
    (``from ddpnet.lab import state`` names the module ``ddpnet.lab.state``)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                out.add(sub if sub in known else node.module)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return out & known


def test_no_two_modules_import_each_other() -> None:
    """A cycle between two files, even one typed only under TYPE_CHECKING, means a shared
    type wants its own module (``lab/result.py``, ``monitor/result.py``)."""
    paths = {_module_name(p): p for p in _modules()}
    known = set(paths)
    graph = {name: _module_imports(path, known) - {name} for name, path in paths.items()}
    pairs = sorted(f"{a} <-> {b}" for a, targets in graph.items() for b in targets
                   if a < b and a in graph.get(b, set()))
    assert not pairs, "\n".join(pairs)
