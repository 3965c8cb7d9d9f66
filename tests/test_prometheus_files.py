"""prometheus/ (the alerting rules, their promtool unit tests, the Grafana dashboard) stays in
step with what ddpnet serves: every metric and label they use is one the job's collector
(watch.metrics) or the node's (monitor.metrics) emits, and promtool accepts the rules."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.monitor.test_metrics import scrape as node_scrape
from tests.monitor.test_metrics import state as node_state
from tests.watch.test_metrics import scrape as job_scrape
from tests.watch.test_metrics import view as job_view

FILES = Path(__file__).resolve().parents[1] / "prometheus"
NAME = re.compile(r"\bddpnet_[a-z0-9_]+")
LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def emitted() -> dict[str, set[str]]:
    """Every sample name ddpnet serves (a fixture that fills every family), with its labels."""
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(job_scrape(job_view())):
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    for (name, labels), _value in node_scrape(node_state()).items():
        out.setdefault(name, set()).update(k for k, _v in labels)
    return out


def rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load((FILES / "alerts.yml").read_text())
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def dashboard_exprs() -> Iterator[tuple[str, str]]:
    """(expr, legend) of every panel target and template query."""
    board = json.loads((FILES / "grafana-dashboard.json").read_text())
    for panel in board["panels"]:
        for target in panel["targets"]:
            yield target["expr"], target.get("legendFormat", "")
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            yield variable["definition"], ""


def test_the_fixture_fills_every_family_so_the_check_below_can_fail() -> None:
    names = emitted()
    assert "ddpnet_step_seconds_bucket" in names and "ddpnet_node_gpu_power_watts" in names
    assert "ddpnet_verdict" in names and "ddpnet_probe_bandwidth_bytes_per_second" in names


def test_the_rules_use_only_metrics_ddpnet_serves() -> None:
    names = emitted()
    used = {m for rule in rules() for m in NAME.findall(rule["expr"])}
    assert used and used <= set(names), used - set(names)
    for rule in rules():  # labels the annotations print are the series' own
        labels = set.union(*(names[m] for m in NAME.findall(rule["expr"])))
        for text in rule.get("annotations", {}).values():
            assert set(re.findall(r"\$labels\.(\w+)", text)) <= labels, (rule["alert"], text)


def test_the_dashboard_uses_only_metrics_and_labels_ddpnet_serves() -> None:
    names = emitted()
    exprs = list(dashboard_exprs())
    assert len(exprs) > 10
    for expr, legend in exprs:
        used = NAME.findall(expr)
        assert used and set(used) <= set(names), (expr, set(used) - set(names))
        labels = set.union(*(names[m] for m in used))
        assert set(LEGEND.findall(legend)) <= labels, (expr, legend)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian's prometheus)")
def test_promtool_checks_the_rules_and_their_unit_tests_pass() -> None:
    for args in (["check", "rules", "alerts.yml"], ["test", "rules", "alerts_test.yml"]):
        out = subprocess.run(["promtool", *args], cwd=FILES, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, (args, out.stdout, out.stderr)
