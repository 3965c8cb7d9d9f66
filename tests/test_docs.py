"""The docs stay true to the code: every cause id the code can report has an entry in
docs/causes.md and every entry names an id the code still has; the README stays a front page;
relative links in README.md and docs/*.md point at files that exist.

Cause ids are collected from the source by AST, wherever the code that reports them lives:
- the ``cause`` (or ``cause_id``) argument of any class or function that takes one (``RendezvousError(cause,
  ...)``, ``Choice(value, source, reason, cause, hint)``, ``_Auto(...)``, ...), positional or
  keyword, found from the definitions themselves (an ``__init__`` parameter or a dataclass
  field named ``cause``), so a new carrier of causes is picked up without editing this test;
- the ``id`` of ``Cause(...)`` (check's cause model);
- module-level tables whose name contains ``CAUSE`` (check's ``CAUSE_ORDER``);
- comparisons against ``<x>.cause`` (and against ``<x>.id`` when the string looks like a cause
  id, which doctor check ids such as ``firewall.ephemeral`` do not).
String constants are followed through module-level names (``X = "some-id"``, also imported
from another module), class constants and enum members (``Ids.X``), dict keys of a cause
table, and conditional expressions (``"a" if ok else "b"``, ``cause or "default"``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "ddpnet"
DOCS = ROOT / "docs"
README = ROOT / "README.md"

#: a cause id: lowercase words joined by dashes (doctor check ids have a dot and are not causes)
CAUSE_ID = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)+$")
#: an entry in docs/causes.md: a heading that is just the id in backticks
ENTRY = re.compile(r"^#{2,4} `([a-z0-9.-]+)`\s*$", re.MULTILINE)
#: a markdown link or image target
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _trees() -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(SRC.rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _assigned_strings(body: list[ast.stmt], prefix: str = "") -> dict[str, str]:
    """``NAME = "literal"`` assignments of a module or class body, as ``prefix + NAME``."""
    out: dict[str, str] = {}
    for node in body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)):
            continue
        value = node.value
        if not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        out.update({prefix + t.id: value.value for t in targets if isinstance(t, ast.Name)})
    return out


def _module_strings(tree: ast.Module) -> dict[str, str]:
    """Module-level constants and class constants (``Ids.MASTER = "..."`` as ``Ids.MASTER``),
    so an id named through a constant or an enum member is still seen."""
    out = _assigned_strings(tree.body)
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out.update(_assigned_strings(node.body, f"{node.name}."))
    return out


def _all_strings(trees: list[tuple[Path, ast.Module]]) -> dict[str, str]:
    """Every module's constants, for names imported from another module (the module's own
    constants win over these)."""
    out: dict[str, str] = {}
    for _, tree in trees:
        out.update(_module_strings(tree))
    return out


def _strings(expr: ast.AST | None, names: dict[str, str]) -> set[str]:
    """Every string an expression can evaluate to, as far as literals and names tell."""
    if expr is None:
        return set()
    if isinstance(expr, ast.Constant):
        return {expr.value} if isinstance(expr.value, str) and expr.value else set()
    if isinstance(expr, ast.Name):
        return {names[expr.id]} if expr.id in names else set()
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        dotted = f"{expr.value.id}.{expr.attr}"
        return {names[dotted]} if dotted in names else set()
    if isinstance(expr, ast.IfExp):
        return _strings(expr.body, names) | _strings(expr.orelse, names)
    if isinstance(expr, ast.BoolOp):
        return set().union(*(_strings(v, names) for v in expr.values))
    if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
        return set().union(set(), *(_strings(e, names) for e in expr.elts))
    if isinstance(expr, ast.Dict):  # a cause table keyed by id
        return set().union(set(), *(_strings(k, names) for k in expr.keys))
    return set()


def _params(node: ast.AST) -> list[str]:
    """Positional parameter names of a function, or of a class (its ``__init__``, else its
    dataclass fields in order); ``self`` dropped."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [a.arg for a in [*node.args.posonlyargs, *node.args.args]
                if a.arg not in ("self", "cls")]
    if isinstance(node, ast.ClassDef):
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                return _params(item)
        return [item.target.id for item in node.body
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                and "ClassVar" not in ast.unparse(item.annotation)]
    return []


def _carriers(trees: list[tuple[Path, ast.Module]]) -> dict[str, tuple[str, int]]:
    """Callables that take a cause id: name -> (parameter name, positional index)."""
    out: dict[str, tuple[str, int]] = {}
    for _, tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                    or node.name.startswith("__"):
                continue  # an __init__ counts through its class (super().__init__ is no carrier)
            params = _params(node)
            named = [p for p in params if p in ("cause", "cause_id")]
            if named:
                out[node.name] = (named[0], params.index(named[0]))
            elif isinstance(node, ast.ClassDef) and node.name == "Cause" and "id" in params:
                out[node.name] = ("id", params.index("id"))
    return out


def _call_ids(call: ast.Call, carrier: tuple[str, int], names: dict[str, str]) -> set[str]:
    param, index = carrier
    for kw in call.keywords:
        if kw.arg == param:
            return _strings(kw.value, names)
    if index < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args):
        return _strings(call.args[index], names)
    return set()


def _compared_ids(node: ast.Compare, names: dict[str, str]) -> set[str]:
    sides = [node.left, *node.comparators]
    attrs = {s.attr for s in sides if isinstance(s, ast.Attribute)}
    found = set().union(*(_strings(s, names) for s in sides))
    if "cause" in attrs:
        return found
    if "id" in attrs:
        return {s for s in found if CAUSE_ID.match(s)}
    return set()


def _tables(tree: ast.Module, names: dict[str, str]) -> set[str]:
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and "CAUSE" in t.id for t in targets):
                found |= _strings(node.value, names)
    return found


def code_cause_ids() -> dict[str, set[str]]:
    """Cause id -> the source files (relative to src/ddpnet) that report or name it."""
    trees = list(_trees())
    carriers = _carriers(trees)
    everywhere = _all_strings(trees)
    found: dict[str, set[str]] = {}
    for path, tree in trees:
        names = {**everywhere, **_module_strings(tree)}
        ids = _tables(tree, names)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _name(node.func) in carriers:
                ids |= _call_ids(node, carriers[_name(node.func)], names)
            elif isinstance(node, ast.Compare):
                ids |= _compared_ids(node, names)
        for cid in ids:
            found.setdefault(cid, set()).add(str(path.relative_to(SRC)))
    return found


def documented_ids() -> list[str]:
    return ENTRY.findall((DOCS / "causes.md").read_text(encoding="utf-8"))


def test_the_collector_sees_every_kind_of_source() -> None:
    """The AST walk finds ids through each carrier: if it found nothing, (a) would pass."""
    ids = code_cause_ids()
    assert {"group-failed", "master-port-filtered"} <= set(ids)  # RendezvousError(...)
    assert {"ifname-syntax", "master-loopback"} <= set(ids)  # Choice(...) / _Auto(...)
    assert {"process-group-failed", "allreduce-wrong", "slow-node"} <= set(ids)  # Cause(id=)
    assert "stage-timeout" in ids  # CAUSE_ORDER and Cause(id=...)
    assert all(CAUSE_ID.match(cid) for cid in ids), sorted(ids)


def test_every_cause_in_the_code_has_an_entry() -> None:
    missing = {cid: sorted(where) for cid, where in code_cause_ids().items()
               if cid not in set(documented_ids())}
    assert not missing, f"cause ids without a docs/causes.md entry (id: where): {missing}"


def test_every_entry_names_a_cause_the_code_has() -> None:
    stale = sorted(set(documented_ids()) - set(code_cause_ids()))
    assert not stale, f"docs/causes.md entries no code reports: {stale}"


def test_each_cause_is_documented_once() -> None:
    entries = documented_ids()
    assert len(entries) == len(set(entries)), sorted(e for e in entries if entries.count(e) > 1)


def test_readmes_check_section_lists_every_cause_check_orders() -> None:
    from ddpnet.check.causes import CAUSE_ORDER

    text = README.read_text(encoding="utf-8")
    missing = [cid for cid in CAUSE_ORDER if f"`{cid}`" not in text]
    assert not missing, f"README's list of what check names lacks: {missing}"


def test_readme_is_a_front_page() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines (cap 250)"
    first_screen = "\n".join(lines[:40])
    assert "make demo" in first_screen and "make test" in first_screen


def _markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def test_relative_links_point_at_files() -> None:
    broken = []
    for md in _markdown_files():
        text = re.sub(r"```.*?```", "", md.read_text(encoding="utf-8"), flags=re.DOTALL)
        for target in LINK.findall(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # http(s):, mailto:, in-page anchors
            path = (md.parent / target.split("#", 1)[0]).resolve()
            if not path.exists():
                broken.append(f"{md.relative_to(ROOT)}: {target}")
    assert not broken, f"relative links to missing files: {broken}"


def test_every_command_has_a_page() -> None:
    pages = {"env", "init", "doctor", "check", "bench", "tune", "launch", "train", "monitor",
             "lab", "architecture", "causes", "scaling", "exit-codes", "k8s", "engines"}
    assert not {p for p in pages if not (DOCS / f"{p}.md").is_file()}


HELP_BLOCK = re.compile(r"^```\n\$ ddpnet ([a-z0-9 ]+?) --help\n(.*?)^```", re.MULTILINE | re.DOTALL)
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def _help_blocks() -> dict[str, str]:
    """Command -> the ``--help`` text pasted in its page's "All flags" section."""
    return {cmd: text for page in sorted(DOCS.glob("*.md"))
            for cmd, text in HELP_BLOCK.findall(page.read_text(encoding="utf-8"))}


def test_pasted_help_names_the_flags_the_cli_has() -> None:
    """The flags (not the wording) of every pasted ``--help`` match the CLI's today, and every
    command has one: a new or removed flag needs its page updated."""
    import os
    import subprocess
    import sys

    blocks = _help_blocks()
    commands = {"env", "doctor", "check", "bench", "tune", "launch", "sbatch", "exec", "k8s",
                "train", "monitor", "lab", "lab up", "lab run", "lab fault", "lab status", "lab down"}
    assert commands <= set(blocks), sorted(commands - set(blocks))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "100"}
    for cmd, text in sorted(blocks.items()):
        live = subprocess.run([sys.executable, "-m", "ddpnet", *cmd.split(), "--help"],
                              capture_output=True, text=True, env=env, timeout=60, check=True)
        assert set(FLAG.findall(text)) == set(FLAG.findall(live.stdout)), cmd


def test_exit_codes_page_lists_every_exit_code() -> None:
    from ddpnet.exitcodes import ExitCode

    page = (DOCS / "exit-codes.md").read_text()
    missing = [int(c) for c in ExitCode if f"| `{int(c)}` |" not in page]
    assert not missing, f"docs/exit-codes.md has no row for {missing}"


def test_every_cause_check_names_says_what_its_evidence_is() -> None:
    """Issue 29: each check cause carries evidence; its docs entry says what it rests on."""
    from ddpnet.check.causes import CAUSE_ORDER

    text = (DOCS / "causes.md").read_text(encoding="utf-8")
    entries = dict(zip(ENTRY.findall(text), re.split(ENTRY, text)[2::2], strict=True))
    missing = [cid for cid in CAUSE_ORDER if "- **Evidence**:" not in entries.get(cid, "")]
    assert not missing, f"docs/causes.md entries without an **Evidence** line: {missing}"
