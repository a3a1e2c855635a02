"""Faults on the tests' real local Slurm, each ending with every cell's final state recorded, the
other cells' results intact, and the sweep brought to completion without re-running finished cells.

- the time limit: Slurm's warning signal (USR2, which submitit asks for before the limit; sent
  here with `scancel -s USR2`, as Slurm does at limit - 90 s) makes the cell record `timeout`;
  with `cluster.max_requeue=1` submitit requeues the job and the next attempt completes, with
  `max_requeue=0` the job ends and `status --retry-failed` runs the cell again;
- a running task cancelled with `scancel` records `cancelled`, and is retried;
- slurmd killed (as if it crashed) and restarted, slurmctld restarted, while cells run (their run
  rows' start and end enclose the kill): they complete once;
- a cell that raises and one out of memory record `failed`/`oom`; with the cause fixed,
  `status --retry-failed` runs exactly those two again.
every fault on both clusters, without and with accounting (slurmdbd). Corrupt and half-written
files are the analysis tests' part (tests/test_analysis_collect.py).

A fault comes once the cells are training: their logs say `measuring` (workloads/run.py), and they
measure for MEASURE_S more, far longer than the fault takes to arrive. The fault's recorded
state (or, for the daemons, the run rows' times) shows that it did arrive while the cell ran.
"""

from __future__ import annotations

import signal
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.helpers import MEASURING, WAIT, always_overcommits, cli, manifest_jobs, table, wait_until
from tests.slurm.cluster import LocalSlurm
from tests.slurm.fixtures import SlurmClusters

#: Seconds a LONG cell measures once its log says `measuring`, however fast the machine: the
#: margin within which a fault sent then arrives (scancel and a daemon's kill take milliseconds).
MEASURE_S = 8
#: A tiny cell that trains for MEASURE_S seconds on a CPU: long enough to be hit while it runs.
LONG = ["cluster=test_slurm", "model=gpt", "size=tiny", "precision=fp32", "device=cpu", "backend=eager",
        "warmup_steps=1", "steps=3", f"measure.min_seconds={MEASURE_S}", "measure.max_steps=null"]


def attempts(sweep: Path) -> dict[str, list[str]]:
    """cell_id -> the statuses of its attempts, in order."""
    found = {}
    for path in sweep.glob("cells/*/run.parquet"):
        runs = pd.read_parquet(path).sort_values("attempt")
        found[path.parent.name] = list(runs["status"])
    return found


def wait_measuring(sweep: Path, cell_ids: list[str], timeout: float = 300) -> None:
    """Until each cell's process says in its log that it measures (warm-up and a measured step done)."""
    def log(cell: str) -> str:
        path = sweep / "cells" / cell / "logs" / "stdout.log"
        return path.read_text() if path.exists() else ""

    wait_until(lambda: [cell for cell in cell_ids if MEASURING not in log(cell)], timeout,
               lambda left: f"cells {left} not measuring", done=lambda left: not left, interval=0.2)


def submit(cluster: LocalSlurm, cwd: Path, *overrides: str) -> dict[str, str]:
    submitted = cli(cwd, "sweep", *LONG, *overrides, "hydra.sweep.dir=sw", env=cluster.env())
    assert submitted.returncode == 0, submitted.stderr
    return manifest_jobs(cwd / "sw")


def wait_sweep(cluster: LocalSlurm, cwd: Path, *overrides: str) -> str:
    """The same sweep again with --wait: submits only what is neither done nor queued, follows to the end."""
    waited = cli(cwd, "sweep", *LONG, *overrides, "hydra.sweep.dir=sw", *WAIT, env=cluster.env(), timeout=600)
    assert waited.returncode == 0, waited.stdout + waited.stderr + cluster.logs()
    return waited.stdout


@pytest.mark.parametrize("accounting", [False, True], ids=["no-accounting", "accounting"])
def test_time_limit_requeues_the_job(slurm_clusters: SlurmClusters, accounting: bool, tmp_path: Path) -> None:
    slurm_cluster = slurm_clusters.get(accounting)
    (cell_id, job_id), = submit(slurm_cluster, tmp_path, "cluster.max_requeue=1").items()
    wait_measuring(tmp_path / "sw", [cell_id])
    slurm_cluster.run("scancel", "-s", "USR2", job_id)
    wait_sweep(slurm_cluster, tmp_path, "cluster.max_requeue=1")
    assert attempts(tmp_path / "sw") == {cell_id: ["timeout", "completed"]}
    runs = pd.read_parquet(tmp_path / "sw" / "cells" / cell_id / "run.parquet").sort_values("attempt")
    first, second = runs.iloc[0], runs.iloc[1]
    assert "SIGUSR2" in first["error"] and second["slurm_job_id"] == job_id  # the same job, requeued
    assert "Restarts=1" in slurm_cluster.run("scontrol", "show", "job", job_id).stdout


@pytest.mark.parametrize("accounting", [False, True], ids=["no-accounting", "accounting"])
def test_timeout_and_scancel_then_retry_failed(slurm_clusters: SlurmClusters, accounting: bool, tmp_path: Path) -> None:
    cluster = slurm_clusters.get(accounting)
    jobs = submit(cluster, tmp_path, "cluster.max_requeue=0", "seed=1,2,3")
    (timed_out, to_job), (cancelled, cancel_job), (untouched, _) = jobs.items()
    wait_measuring(tmp_path / "sw", [timed_out, cancelled])
    cluster.run("scancel", "-s", "USR2", to_job)
    cluster.run("scancel", cancel_job)
    expected = {timed_out: "timeout", cancelled: "cancelled", untouched: "completed"}

    def states() -> dict[str, str]:  # each fault becomes its cell's recorded state; the third cell runs on
        shown = table(cli(tmp_path, "status", "sw", env=cluster.env()).stdout)
        return {cell: shown[cell]["state"] for cell in jobs}

    wait_until(states, 300, lambda last: f"states {last}, expected {expected}", done=lambda now: now == expected,
               interval=1)
    retried = cli(tmp_path, "status", "sw", "--retry-failed", env=cluster.env())
    assert retried.returncode == 0 and "2 cell(s) resubmitted" in retried.stdout, retried.stdout + retried.stderr
    wait_sweep(cluster, tmp_path, "cluster.max_requeue=0", "seed=1,2,3")
    assert attempts(tmp_path / "sw") == {timed_out: ["timeout", "completed"], cancelled: ["cancelled", "completed"],
                                         untouched: ["completed"]}


@pytest.mark.parametrize("accounting", [False, True], ids=["no-accounting", "accounting"])
def test_daemons_restarted_while_cells_run(slurm_clusters: SlurmClusters, accounting: bool, tmp_path: Path) -> None:
    cluster = slurm_clusters.get(accounting)
    jobs = submit(cluster, tmp_path, "seed=1,2")
    wait_measuring(tmp_path / "sw", list(jobs))
    killed = datetime.now(timezone.utc)
    cluster.restart("slurmd", signal.SIGKILL, down_s=3)  # as if it crashed; job steps run on
    cluster.restart("slurmctld")  # recovers the queue from its state directory
    wait_sweep(cluster, tmp_path, "seed=1,2")
    assert attempts(tmp_path / "sw") == {cell: ["completed"] for cell in jobs}  # each ran exactly once
    assert manifest_jobs(tmp_path / "sw") == jobs  # nothing was submitted again
    for cell in jobs:  # the cells were running when slurmd was killed
        run = pd.read_parquet(tmp_path / "sw" / "cells" / cell / "run.parquet").iloc[0]
        assert run["started_at"] < killed < run["finished_at"], (cell, run["started_at"], killed, run["finished_at"])


@pytest.mark.skipif(always_overcommits(), reason="vm.overcommit_memory=1: the OOM killer, not the allocator, would answer")
@pytest.mark.parametrize("accounting", [False, True], ids=["no-accounting", "accounting"])
def test_exception_and_out_of_memory_cells(slurm_clusters: SlurmClusters, accounting: bool, tmp_path: Path) -> None:
    """Three sweeps into one directory: a cell whose data is too short (it raises), one far too big
    (out of memory), one that completes; then the data is fixed and only the two are run again."""
    slurm_cluster = slurm_clusters.get(accounting)
    data = tmp_path / "tokens.bin"
    np.arange(10, dtype=np.uint16).tofile(data)  # shorter than one block: the workload raises
    base = [*LONG[:-3], "steps=2", "measure.min_seconds=0"]
    for overrides in (["data.source=bin", f"data.path={data}"], ["batch_size=10000000000"], ["seed=5"]):
        submitted = cli(tmp_path, "sweep", *base, *overrides, "hydra.sweep.dir=sw", env=slurm_cluster.env())
        assert submitted.returncode == 0, submitted.stderr
    assert len(manifest_jobs(tmp_path / "sw")) == 3  # three sweeps, one manifest holding all their cells
    waited = cli(tmp_path, "sweep", *base, "seed=5", "hydra.sweep.dir=sw", *WAIT, env=slurm_cluster.env(),
                 timeout=600)
    assert waited.returncode == 1  # the sweep directory holds two cells that did not complete
    states = {row["state"]: cell for cell, row in table(waited.stdout).items()}
    assert set(states) == {"failed", "oom", "completed"}, waited.stdout
    (np.arange(5000) % 10).astype(np.uint16).tofile(data)  # fixed (same 10 symbols); the configs stay as they were
    retried = cli(tmp_path, "status", "sw", "--retry-failed", env=slurm_cluster.env())
    assert retried.returncode == 0 and "2 cell(s) resubmitted" in retried.stdout, retried.stdout + retried.stderr
    cli(tmp_path, "sweep", *base, "seed=5", "hydra.sweep.dir=sw", *WAIT, env=slurm_cluster.env(), timeout=600)
    assert attempts(tmp_path / "sw") == {states["failed"]: ["failed", "completed"], states["oom"]: ["oom", "oom"],
                                         states["completed"]: ["completed"]}
