"""Launching jobs: torchrun, mpirun, SLURM and SSH (``--hostfile``) command lines built from
the resolved config.

We write no process manager and no SSH protocol: torchrun (elastic restarts), SLURM and the
system ``ssh`` run the processes; this package builds their command lines and environments
(pure: ``command``, ``plan``, ``hostfile``, ``ssh``, ``hostlaunch.plan``) and runs them (edges:
``engine``, ``sshrun``; ``remote`` is the wrapper every SSH-started host runs).
"""
