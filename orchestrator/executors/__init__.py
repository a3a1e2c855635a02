"""The executors and what runs a cell: the `Executor` seam (base) and its choice, the local executor,
one cell as its own process, each cell's state; the Slurm executor in slurm/."""
