"""Helpers for tests that need a real lab (network namespaces).

    # conftest.py of your test directory (a fixture imported into a test module trips ruff F811):
    from tests.lab_util import make_lab
    __all__ = ["make_lab"]

    # test module:
    from tests.lab_util import fresh_lab, requires_netns
    pytestmark = requires_netns                     # skip with a reason without root/netns

    def test_x(make_lab):
        lab = make_lab("nt", nodes=3, rate="1gbit")  # up; always down after the test
        lab.run([...])

    @pytest.fixture(scope="module")
    def lab():                                      # one lab shared by a module's tests
        with fresh_lab("nt", nodes=2) as lab:
            yield lab

Names are ``<prefix><pid>x<counter>`` so concurrent test runs never collide; use your own
prefix (the shared-machine rule).
"""

from __future__ import annotations

import functools
import itertools
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from ddpnet.lab import Lab


@functools.lru_cache(maxsize=1)
def netns_unavailable_reason() -> str | None:
    """Why a lab cannot be built here, or None when it can (root, tools, a real netns)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces); run the tests as root"
    for tool in ("ip", "tc", "unshare", "nft"):
        if shutil.which(tool) is None:
            return f"needs '{tool}' (apt-get install iproute2 nftables util-linux)"
    try:
        probe = subprocess.run(["unshare", "--net", "--uts", "true"], capture_output=True,
                               text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot create a network namespace: {exc}"
    if probe.returncode != 0:
        return f"cannot create a network namespace: {probe.stderr.strip()}"
    return None


#: mark a test (or ``pytestmark =`` a module) that builds a lab
requires_netns = pytest.mark.skipif(
    netns_unavailable_reason() is not None,
    reason=netns_unavailable_reason() or "network namespaces available",
)

_counter = itertools.count()


def unique_name(prefix: str) -> str:
    """A lab name no other test (process) uses at the same time: ``<prefix><pid>x<n>``."""
    return f"{prefix}{os.getpid()}x{next(_counter)}"


@contextmanager
def fresh_lab(prefix: str, **kwargs: Any) -> Iterator[Lab]:
    """A uniquely named lab, up for the ``with`` body and always removed after it."""
    with Lab(name=unique_name(prefix), **kwargs) as lab:
        yield lab


@pytest.fixture
def make_lab() -> Iterator[Callable[..., Lab]]:
    """``make_lab(prefix, **Lab kwargs)`` builds a uniquely named lab; every lab it built is
    removed when the test ends, pass or fail."""
    labs: list[Lab] = []

    def _make(prefix: str, **kwargs: Any) -> Lab:
        lab = Lab(name=unique_name(prefix), **kwargs)
        lab.up()  # removes what it half-built if it fails
        labs.append(lab)
        return lab

    yield _make
    errors = []
    for lab in reversed(labs):
        try:
            lab.down()
        except Exception as exc:  # tear every lab down, then report the first error
            errors.append(exc)
    if errors:
        raise errors[0]
