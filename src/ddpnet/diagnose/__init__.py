"""``ddpnet diagnose``: the watch's report for a job that hangs now (from its hub) or died
(from its dump files)."""
