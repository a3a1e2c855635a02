"""SIGINT or SIGTERM on the login node while a sweep's job arrays are submitted, on the tests'
real local Slurm: the arrays submitted before the signal (the one whose sbatch was running
included) are in the manifest, the rest are not submitted, and the same command run again submits
only the rest — no cell twice.

The sweep has cells of two models, which need different resources (A100 for gpt, H100 for resnet):
two job arrays, two sbatch calls. To interrupt between them deterministically, `sbatch` is first on
PATH as a script that, on its first call, says so in a file and waits for a second file before it
runs the real sbatch: the test sends the real signal to the command line while that first sbatch
is in flight, then lets it go on. The jobs are held (they never run) and cancelled at the end.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.helpers import (
    SLURM_JOB_TIMEOUT_S,
    TINY,
    cli_popen,
    jobs_from,
    manifest_jobs,
    slurm_cli,
    wait_until,
)
from tests.helpers.slurm.cluster import LocalSlurm

ARGS = [
    "sweep",
    "cluster=test_slurm",
    *(a for a in TINY if not a.startswith("model=")),
    "model=gpt,resnet",
    "backend=eager",
    "seed=1,2",
    "+cluster.sbatch_extra.hold=true",
    "hydra.sweep.dir=sw",
]


def paused_sbatch(directory: Path, real_sbatch: str) -> Path:
    """A directory whose `sbatch` runs the real one, the first call only once `go` exists
    (`paused` is written when that call begins)."""
    directory.mkdir()
    script = directory / "sbatch"
    script.write_text(f"""#!/bin/sh
if mkdir {directory}/first 2>/dev/null; then
  touch {directory}/paused
  while [ ! -e {directory}/go ]; do sleep 0.05; done
fi
exec {real_sbatch} "$@"
""")
    script.chmod(0o755)
    return directory


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupted_between_arrays_then_the_rest(
    slurm_cluster: LocalSlurm, tmp_path: Path, signum: signal.Signals
) -> None:
    env = slurm_cluster.env()
    pause = paused_sbatch(tmp_path / "bin", slurm_cluster.install.command("sbatch"))
    path = f"{pause}{os.pathsep}{env.get('PATH', os.environ['PATH'])}"
    try:
        proc = cli_popen(
            tmp_path,
            *ARGS,
            env={**env, "PATH": path},
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        wait_until(
            lambda: (pause / "paused").exists() or proc.poll() is not None,
            SLURM_JOB_TIMEOUT_S,
            lambda _: "the first sbatch never began",
        )
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signum)  # while the first array's sbatch runs
        (pause / "go").touch()
        out, err = proc.communicate(timeout=SLURM_JOB_TIMEOUT_S)
        assert proc.returncode == 128 + signum, out + err
        assert f"interrupted by {signum.name}: 1 of 2 job array(s) submitted" in err, err
        first = manifest_jobs(tmp_path / "sw")
        submitted = {cell: job for cell, job in first.items() if isinstance(job, str)}
        assert len(first) == 4 and len(submitted) == 2, first  # the array in flight was recorded
        assert jobs_from(slurm_cluster, tmp_path) == set(submitted.values())

        again = slurm_cli(slurm_cluster, tmp_path, *ARGS)  # the same command, the real sbatch
        assert again.returncode == 0, again.stdout + again.stderr
        assert "2 cell(s) submitted in 1 job array(s), 2 not submitted" in again.stdout, again.stdout
        jobs = manifest_jobs(tmp_path / "sw")
        assert {cell: jobs[cell] for cell in submitted} == submitted and all(
            isinstance(j, str) for j in jobs.values()
        ), jobs
        assert jobs_from(slurm_cluster, tmp_path) == set(jobs.values())  # four cells, four jobs: none twice
        assert len({job.split("_")[0] for job in jobs.values()}) == 2  # in two arrays, one per resources
    finally:
        leftover = jobs_from(slurm_cluster, tmp_path)
        if leftover:
            slurm_cluster.run("scancel", *sorted(leftover))
