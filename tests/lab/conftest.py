"""The lab fixtures for this directory (other test directories do the same in theirs)."""

from __future__ import annotations

from tests.lab_util import make_lab

__all__ = ["make_lab"]
