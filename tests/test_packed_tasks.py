"""Packed array tasks (`cluster.cells_per_task`) on the local Slurm: cells run one after another in
an array task, each with its own record (run rows, logs, job id `<task>.<place>`, status).

Planning (tasks per array, time per task, the partition's limit, the golden script) is in
tests/test_slurm_executor.py.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tests.helpers import TINY, WAIT, slurm_cli, table, wait_until_done
from tests.slurm.cluster import LocalSlurm

#: TINY cells of one step and no warm-up: a packed task's cells, each its own process.
QUICK = [*TINY, "steps=1", "warmup_steps=0"]


def test_24_cells_packed_6_to_a_task_complete_once(slurm_cluster: LocalSlurm, tmp_path: Path) -> None:
    """24 tiny cells of one resources, 6 to a task: one array of 4 tasks of 6 x 10 minutes; every
    cell completes once, in its task, with its own job id, logs and compile cache of its task."""
    sweep = tmp_path / "sw"
    args = [
        "sweep",
        "cluster=test_slurm",
        *QUICK,
        "seed=range(0,24)",
        "cluster.cells_per_task=6",
        "hydra.sweep.dir=sw",
    ]
    done = slurm_cli(slurm_cluster, tmp_path, *args, *WAIT)
    assert done.returncode == 0, done.stdout + done.stderr + slurm_cluster.logs()
    jobs = dict(pd.read_parquet(sweep / "manifest.parquet")[["cell_id", "job_id"]].itertuples(index=False))
    cells = [sweep / "cells" / cell for cell in jobs]
    wait_until_done(slurm_cluster, {job.split(".")[0] for job in jobs.values()}, cells)  # their logs whole
    (array,) = {job.split("_")[0] for job in jobs.values()}
    assert sorted(jobs.values()) == sorted(
        f"{array}_{task}.{place}" for task in range(4) for place in range(6)
    )
    assert (
        f"submitted {array}_[0-3]: 24 cell(s) in 4 task(s) on grete:shared, gpu:A100:1 (1 cpus, 1G, 60 min)"
        in (done.stdout)
    )
    script = (sweep / "sbatch" / f"{array}.sh").read_text()
    assert "#SBATCH --array=0-3%4\n" in script and "#SBATCH --time=60\n" in script
    caches: dict[str, set[str]] = {}
    for cell, job in jobs.items():
        runs = pd.read_parquet(sweep / "cells" / cell / "run.parquet")
        assert list(runs["status"]) == ["completed"], (cell, job, list(runs["error"]))
        run = runs.iloc[0]
        task = job.split(".")[0]
        assert f"{run['slurm_job_id']}_{run['slurm_array_task_id']}" == task
        caches.setdefault(task, set()).add(run["compile_cache_dir"])
        log = sweep / "cells" / cell / "logs" / f"slurm-{job}.out"
        assert f"({cell}) ... completed" in log.read_text()  # the task's log, linked from each cell
    assert all(len(dirs) == 1 for dirs in caches.values()) and len(set.union(*caches.values())) == 4, caches
    shown = table(done.stdout)
    assert {row["state"] for row in shown.values()} == {"completed"} and {
        r["job_id"] for r in shown.values()
    } == set(jobs.values())
    again = slurm_cli(slurm_cluster, tmp_path, *args)
    assert "nothing to submit: 24 cell(s) completed" in again.stdout, again.stdout + again.stderr
