"""THP_MEM_ALLOC_ENABLE: ddpnet train's default, the user's value winning, and that torch
really puts a large tensor on huge pages when the variable is set before it is imported."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ddpnet.train import hugepages
from tests.conftest import clean_environ


def test_on_by_default_and_the_users_value_wins() -> None:
    assert hugepages.default_env({}) == {"THP_MEM_ALLOC_ENABLE": "1"}
    assert hugepages.default_env({"THP_MEM_ALLOC_ENABLE": "0"}) == {}
    assert hugepages.enabled({"THP_MEM_ALLOC_ENABLE": "1"})
    assert not hugepages.enabled({"THP_MEM_ALLOC_ENABLE": "0"})
    assert not hugepages.enabled({})
    assert "off" in hugepages.describe({"THP_MEM_ALLOC_ENABLE": "0"})
    assert "huge pages" in hugepages.describe({"THP_MEM_ALLOC_ENABLE": "1"})


ALLOCATE = """
import torch
def huge_kb():
    for line in open("/proc/self/smaps_rollup"):
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    return 0
before = huge_kb()
t = torch.ones(64 * 1024 * 1024 // 4)  # 64 MiB, touched
print(huge_kb() - before)
"""


@pytest.mark.parametrize(("value", "huge"), [("1", True), ("0", False)])
def test_torch_reads_the_variable(value: str, huge: bool) -> None:
    mode = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not mode.exists() or "[never]" in mode.read_text():
        pytest.skip("transparent huge pages are off in this kernel")
    if "[always]" in mode.read_text() and not huge:
        pytest.skip("THP mode 'always' gives huge pages without the variable")
    out = subprocess.run([sys.executable, "-c", ALLOCATE], capture_output=True, text=True,
                         env=clean_environ({"THP_MEM_ALLOC_ENABLE": value}), timeout=60,
                         check=True)
    grown_kb = int(out.stdout.strip())
    assert (grown_kb >= 32 * 1024) is huge, grown_kb
