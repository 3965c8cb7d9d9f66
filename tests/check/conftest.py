"""Fixtures shared by the check tests: ``clean`` gives a module's ``lab`` fixture with no
fault before and after each test (each lab test module defines its own ``lab``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ddpnet.lab import Lab


@pytest.fixture
def clean(lab: Lab) -> Iterator[Lab]:
    lab.clear()
    yield lab
    lab.clear()
