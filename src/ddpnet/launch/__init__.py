"""Launching jobs: torchrun, mpirun and SLURM command lines built from the resolved config.

We write no process manager: torchrun (elastic restarts) and SLURM run the processes; this
package builds their command lines and environments (pure) and runs them (edges: ``runner``).
"""
