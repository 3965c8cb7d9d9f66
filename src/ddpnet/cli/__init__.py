"""The command line: parsing and rendering only; the work lives in the library modules."""

from __future__ import annotations
