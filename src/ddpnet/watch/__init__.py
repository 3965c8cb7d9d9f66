"""Hangs and slowdowns in the middle of training (docs/watch.md); ``state`` is the one schema every
part reads and writes."""
