"""Hangs and slowdowns in the middle of training (issue 20): a per-rank collective recorder, a
heartbeat on a side channel, a watchdog that names the cause, and the analysis ``ddpnet
diagnose`` shares. ``state`` is the one schema every part reads and writes."""
