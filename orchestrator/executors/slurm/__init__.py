"""The Slurm executor: its plan of job arrays, their submission and sbatch scripts, what a task runs
(one cell, or several packed into one task), asking the scheduler."""
