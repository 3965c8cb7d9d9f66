"""Resolving rank, world size and master from whatever launched this process.

One small class per launcher (``torchrun.py``, ``slurm.py``, ...), a priority order in
``detect.py``, and ``resolve.py`` that merges, derives and validates.
"""

from __future__ import annotations
