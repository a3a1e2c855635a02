"""Packed array tasks (`cluster.cells_per_task`) on the local Slurm: cells run one after another in
an array task, each with its own record (run rows, logs, job id `<task>.<place>`, status).

Planning (tasks per array, time per task, the partition's limit, the golden script) is in
tests/system/test_slurm_executor.py.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
from pathlib import Path

import pandas as pd
import yaml

from tests.helpers import (
    TINY,
    WAIT,
    attempts,
    manifest_jobs,
    slurm_cli,
    table,
    wait_measuring,
    wait_until,
    wait_until_done,
)
from tests.helpers.slurm.cluster import LocalSlurm

#: TINY cells of one step and no warm-up: a packed task's cells, each its own process.
QUICK = [*TINY, "steps=1", "warmup_steps=0"]
#: Submitted held (`scontrol release` starts them): the test first makes one cell of a task long.
HELD = "+cluster.sbatch_extra.hold=true"


def measure_for(sweep: Path, cell: str, seconds: float) -> None:
    """Set how long the cell measures in its config.yaml (what its next attempt reads): a cell
    that is still training when a fault comes (120 s), or one that ends at once (0)."""
    path = sweep / "cells" / cell / "config.yaml"
    config = yaml.safe_load(path.read_text())
    config["measure"].update(min_seconds=seconds, max_steps=None if seconds else 5000)
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def by_place(jobs: dict[str, str]) -> dict[str, list[str]]:
    """{task job id: its cells in place order} of a manifest's packed job ids."""
    tasks: dict[str, list[str]] = {}
    for cell, job in sorted(jobs.items(), key=lambda item: int(item[1].rpartition(".")[2])):
        tasks.setdefault(job.rpartition(".")[0], []).append(cell)
    return tasks


def kill_task(cluster: LocalSlurm, task: str) -> None:
    """SIGKILL every process of the task's step (its runner, the cells' processes), as a crash or the
    kernel's OOM killer would: nothing of them can record anything. (`scancel --signal=KILL` is a
    cancel in Slurm: SIGTERM first.)"""
    job = cluster.run("squeue", "-h", "-j", task, "-o", "%A").stdout.strip()
    rows = [line.split() for line in cluster.run("scontrol", "listpids", job).stdout.splitlines()[1:]]
    pids = [
        int(row[0]) for row in rows if row[2] == "0"
    ]  # PID JOBID STEPID ...: step 0, not the batch script
    assert pids, rows
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def states(cluster: LocalSlurm, cwd: Path) -> dict[str, str]:
    """cell_id -> its state in `compilebench status`."""
    shown = slurm_cli(cluster, cwd, "status", "sw")
    return {cell: row["state"] for cell, row in table(shown.stdout).items()}


def wait_states(cluster: LocalSlurm, cwd: Path, expected: dict[str, str]) -> None:
    wait_until(
        lambda: states(cluster, cwd),
        300,
        lambda last: f"states {last}, expected {expected}\n{cluster.logs()}",
        done=lambda now: all(now.get(cell) == state for cell, state in expected.items()),
        interval=1,
    )


def test_12_cells_packed_3_to_a_task_complete_once(slurm_cluster: LocalSlurm, tmp_path: Path) -> None:
    """12 tiny cells of one resources, 3 to a task: one array of 4 tasks of 3 x 10 minutes; every
    cell completes once, in its task, with its own job id, logs and compile cache of its task. (Each
    cell is a process that imports torch: 24 cells 6 to a task took 62 s on CI's 2 cores, for no
    more than what 3 places of 4 tasks show.)"""
    sweep = tmp_path / "sw"
    args = [
        "sweep",
        "cluster=test_slurm",
        *QUICK,
        "seed=range(0,12)",
        "cluster.cells_per_task=3",
        "hydra.sweep.dir=sw",
    ]
    done = slurm_cli(slurm_cluster, tmp_path, *args, *WAIT)
    assert done.returncode == 0, done.stdout + done.stderr + slurm_cluster.logs()
    jobs = dict(pd.read_parquet(sweep / "manifest.parquet")[["cell_id", "job_id"]].itertuples(index=False))
    cells = [sweep / "cells" / cell for cell in jobs]
    wait_until_done(slurm_cluster, {job.split(".")[0] for job in jobs.values()}, cells)  # their logs whole
    (array,) = {job.split("_")[0] for job in jobs.values()}
    assert sorted(jobs.values()) == sorted(
        f"{array}_{task}.{place}" for task in range(4) for place in range(3)
    )
    assert (
        f"submitted {array}_[0-3]: 12 cell(s) in 4 task(s) on grete:shared, gpu:A100:1 (1 cpus, 1G, 30 min)"
        in (done.stdout)
    )
    script = (sweep / "sbatch" / f"{array}.sh").read_text()
    assert "#SBATCH --array=0-3%4\n" in script and "#SBATCH --time=30\n" in script
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
    assert "nothing to submit: 12 cell(s) completed" in again.stdout, again.stdout + again.stderr


def test_a_real_time_limit_in_the_middle_of_a_task(slurm_cluster: LocalSlurm, tmp_path: Path) -> None:
    """A task of three cells whose middle one trains until the limit: while it trains, `status` shows
    the first completed, it running, the last pending. Its task's time limit is then lowered so that
    Slurm's own warning (USR2, `signal_delay_s` = 75 s ahead) is due at Slurm's next look (every
    30 s), before the limit itself: the middle cell records `timeout`, the task is requeued, and
    runs the middle cell again (made short) and the last one; the first is not run again."""
    args = [
        "cluster.cells_per_task=3",
        "cluster.time_min=1",
        "cluster.signal_delay_s=75",
        "cluster.max_requeue=1",
    ]
    submitted = slurm_cli(
        slurm_cluster,
        tmp_path,
        "sweep",
        "cluster=test_slurm",
        *QUICK,
        "seed=1,2,3",
        *args,
        HELD,
        "hydra.sweep.dir=sw",
    )
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    sweep, jobs = tmp_path / "sw", manifest_jobs(tmp_path / "sw")
    ((task, (first, middle, last)),) = by_place(jobs).items()
    assert "#SBATCH --time=3\n" in (sweep / "sbatch" / f"{task}.sh").read_text()
    measure_for(sweep, middle, 120)
    slurm_cluster.run("scontrol", "release", task)
    wait_measuring(sweep, [middle])
    assert states(slurm_cluster, tmp_path) == {first: "completed", middle: "running", last: "pending"}

    shown = slurm_cluster.run("scontrol", "show", "job", task).stdout
    hours, minutes, seconds = map(int, re.search(r"RunTime=(?:\d+-)?(\d+):(\d+):(\d+)", shown).groups())
    elapsed = hours * 3600 + minutes * 60 + seconds
    # 45 to 105 s left: USR2 comes at Slurm's next look (<= 75 + 30 s left), at least 15 s before the limit.
    slurm_cluster.run("scontrol", "update", f"JobId={task}", f"TimeLimit={math.ceil((elapsed + 45) / 60)}")
    wait_until(
        lambda: attempts(sweep).get(middle),
        120,
        lambda last: f"attempts of the middle cell: {last}\n{slurm_cluster.logs()}",
        done=lambda runs: runs == ["timeout"],
        interval=0.2,
    )
    measure_for(sweep, middle, 0)
    slurm_cluster.run(
        "scontrol", "update", f"JobId={task}", "TimeLimit=3"
    )  # the requeued run: no limit in sight
    wait_states(slurm_cluster, tmp_path, dict.fromkeys(jobs, "completed"))
    assert attempts(sweep) == {first: ["completed"], middle: ["timeout", "completed"], last: ["completed"]}
    runs = pd.read_parquet(sweep / "cells" / middle / "run.parquet")
    assert runs["error"].iloc[0].startswith("received SIGUSR2") and set(runs["slurm_job_id"]) == {task}
    assert (
        "Restarts=1" in slurm_cluster.run("scontrol", "show", "job", task).stdout
    )  # requeued, not resubmitted
    assert manifest_jobs(sweep) == jobs
    log = (sweep / "cells" / first / "logs" / f"slurm-{jobs[first]}.out").read_text()
    assert log.count(f"({first}) ... completed") == 1 and f"({first}) ... already completed" in log


def test_a_killed_task_leaves_its_unfinished_cells_lost_and_they_are_retried_packed(
    slurm_cluster: LocalSlurm, tmp_path: Path
) -> None:
    """Two tasks of three cells, each ended while its middle cell trains: one by `scancel` (SIGTERM:
    the middle cell records `cancelled`, the task gives no more turns), one killed (its processes
    SIGKILLed: nothing recorded). The cells after them are `lost`, so is the killed one; `status
    --retry-failed` packs the four the same way (tasks of three, held as the profile says) and each
    cell completes once."""
    overrides = [
        "cluster=test_slurm",
        *QUICK,
        "seed=range(1,7)",
        "cluster.cells_per_task=3",
        HELD,
        "hydra.sweep.dir=sw",
    ]
    submitted = slurm_cli(slurm_cluster, tmp_path, "sweep", *overrides)
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    sweep, jobs = tmp_path / "sw", manifest_jobs(tmp_path / "sw")
    (term, (t0, t1, t2)), (kill, (k0, k1, k2)) = by_place(jobs).items()
    for cell in (t1, k1):
        measure_for(sweep, cell, 120)
    slurm_cluster.run("scontrol", "release", term.split("_")[0])
    wait_measuring(sweep, [t1, k1])
    running = {t0: "completed", t1: "running", t2: "pending", k0: "completed", k1: "running", k2: "pending"}
    assert states(slurm_cluster, tmp_path) == running
    slurm_cluster.run("scancel", term)
    kill_task(slurm_cluster, kill)
    ended = {t0: "completed", t1: "cancelled", t2: "lost", k0: "completed", k1: "lost", k2: "lost"}
    wait_states(slurm_cluster, tmp_path, ended)
    for cell in (t1, k1):
        measure_for(sweep, cell, 0)

    retried = slurm_cli(slurm_cluster, tmp_path, "status", "sw", "--retry-failed")
    assert retried.returncode == 0 and "4 cell(s) resubmitted" in retried.stdout, (
        retried.stdout + retried.stderr
    )
    again = manifest_jobs(sweep)
    (array,) = {again[cell].split("_")[0] for cell in (t1, t2, k1, k2)}
    assert [again[cell] for cell in (t1, t2, k1, k2)] == [
        f"{array}_0.0",
        f"{array}_0.1",
        f"{array}_0.2",
        f"{array}_1.0",
    ]
    slurm_cluster.run("scontrol", "release", array)
    wait_states(slurm_cluster, tmp_path, dict.fromkeys(jobs, "completed"))
    assert attempts(sweep) == {**dict.fromkeys(jobs, ["completed"]), t1: ["cancelled", "completed"]}
