"""Reference DDP training (``ddpnet train``): model, data, loop and checkpointing in small
modules meant to be read and copied. Importing this package does not import torch."""

from __future__ import annotations
