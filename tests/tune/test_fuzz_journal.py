"""Property-based: a journal with arbitrary JSON in it is loaded and reverted, or refused with
one clean ConfigError (exit 2), never another exception, and nothing outside the root moves."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ddpnet.tune.apply import JOURNAL, Journal, revert
from tests.fuzzing import FUZZ, clean

_leaf = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=8),
                  st.sampled_from(["/etc/x", "../canary", "/var/lib/ddpnet/backups/a", "a/..",
                                   "/", ""]))
_json = st.recursive(_leaf, lambda kids: st.one_of(st.lists(kids, max_size=3),
                                                   st.dictionaries(st.text(max_size=6), kids,
                                                                   max_size=3)), max_leaves=12)
_entry = st.fixed_dictionaries({}, optional={"backup": _leaf, "sha256": _leaf, "revert": _json,
                                             "ran": _json})
_journal = st.one_of(
    _json,
    st.fixed_dictionaries({
        "version": st.just(1),
        "dirs": st.one_of(_json, st.lists(_leaf, max_size=3)),
        "files": st.one_of(_json, st.dictionaries(_leaf.filter(lambda v: isinstance(v, str)),
                                                  _entry, max_size=2)),
        "touched": st.one_of(_json, st.dictionaries(st.sampled_from(["/etc/x", "../canary"]),
                                                    _entry, max_size=2)),
        "parts": st.one_of(_json, st.dictionaries(st.text(max_size=4), _entry, max_size=2)),
    }),
)


def _no_runner(argv: Any, *args: Any, **kwargs: Any) -> Any:
    raise AssertionError(f"a fuzzed journal ran a command: {argv}")


@FUZZ
@given(st.one_of(_journal.map(json.dumps), st.text(max_size=30)))
def test_any_journal_loads_reverts_or_fails_cleanly(text: str) -> None:
    with tempfile.TemporaryDirectory() as top:
        canary = Path(top, "canary")
        canary.write_text("keep")
        root = Path(top, "root")
        journal = root / JOURNAL.lstrip("/")
        journal.parent.mkdir(parents=True)
        journal.write_text(text)
        if clean(Journal.load, root) is not None:
            try:
                clean(revert, root, _no_runner, live=False)
            except OSError as exc:  # the CLI prints one on a named path as a user error
                assert exc.filename, exc
        assert canary.read_text() == "keep"
        assert sorted(p.name for p in Path(top).iterdir()) == ["canary", "root"]


def test_a_nul_byte_in_a_journal_path_is_refused_cleanly() -> None:
    # found by the fuzzer: a "\u0000" directory made revert raise ValueError (embedded null
    # byte) from the path resolution
    with tempfile.TemporaryDirectory() as top:
        root = Path(top)
        journal = root / JOURNAL.lstrip("/")
        journal.parent.mkdir(parents=True)
        journal.write_text(json.dumps({"version": 1, "dirs": ["/a\x00"], "files": {},
                                       "touched": {}, "parts": {}}))
        assert clean(revert, root, _no_runner, live=False) is None


def test_a_journal_naming_the_root_itself_is_refused() -> None:
    # found by the fuzzer: a file entry "" resolved to the root, and revert tried to read
    # (or remove) the root directory as a file
    with tempfile.TemporaryDirectory() as top:
        root = Path(top)
        journal = root / JOURNAL.lstrip("/")
        journal.parent.mkdir(parents=True)
        journal.write_text(json.dumps({"version": 1, "dirs": ["/"], "files": {
            "": {"backup": None}}, "touched": {}, "parts": {}}))
        assert clean(Journal.load, root) is None
        assert root.is_dir()
