"""``ddpnet tune``'s human output: the dry run per part, what an apply or revert did."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from ddpnet.tune import apply as ap
from ddpnet.tune.plan import build_plan
from ddpnet.tune.render import render
from ddpnet.tune.run import TuneResult
from tests.tune.fixtures import FACTS, request


def _text(result: TuneResult) -> str:
    buf = io.StringIO()
    render(result, Console(file=buf, width=200, color_system=None, soft_wrap=True))
    return buf.getvalue()


def test_dry_run_shows_sources_diffs_and_commands(tmp_path: Path) -> None:
    plan = build_plan(request("rhel9", "nftables"), FACTS)
    text = _text(TuneResult("dry-run", tmp_path, plan, tuple(ap.dry_run(plan, tmp_path))))
    assert f"ddpnet tune (dry run) for node1.cluster under {tmp_path}" in text
    assert "iface    ens33  (--iface)" in text
    assert "== sysctl" in text and "+++ " in text and "would run: " in text
    assert text.rstrip().endswith("Nothing was changed. Apply with --apply (root); undo later "
                                  "with --revert.")


def test_revert_lists_files_commands_and_problems() -> None:
    outcome = ap.Outcome(files=[{"action": "restored", "path": "/etc/hosts"}],
                         commands=[{"status": "ran", "argv": ["sysctl", "--system"]}],
                         failed=["nft delete table: not found"])
    result = TuneResult("revert", Path("/"), outcome=outcome)
    text = _text(result)
    assert "ddpnet tune --revert" in text and "restored   /etc/hosts" in text
    assert "ran        sysctl --system" in text
    assert "problem: nft delete table: not found" in text
    assert result.exit_code == 1
    assert _text(TuneResult("revert", Path("/"), outcome=ap.Outcome())).endswith(
        "nothing to do\n")


def test_apply_adds_warnings_and_sysctls_not_taken() -> None:
    plan = build_plan(request("rhel9", "nftables"), FACTS)
    result = TuneResult("apply", Path("/"), plan, outcome=ap.Outcome(),
                        sysctl_not_taken=("net.core.rmem_max: absent",))
    text = _text(result)
    assert text.startswith("ddpnet tune --apply (no changes)")
    assert "warning: sysctl net.core.rmem_max: absent" in text
    assert all(f"warning: {w}" in text for p in plan.parts for w in p.warnings)
    assert result.exit_code == 0
