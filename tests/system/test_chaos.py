"""A chaotic queue (`pytest -m chaos -s tests/system/test_chaos.py`; out of the default run: it takes
minutes): CELLS tiny cells in job arrays of ARRAY_SIZE tasks, each throttled to PARALLELISM
running tasks, on the tests' real local Slurm, while a seeded driver injects many faults at once:
running and pending tasks cancelled (scancel), running tasks requeued (`scontrol requeue`),
slurmd and slurmctld killed and restarted, and the sweep's own filesystem (a small tmpfs) filled
until a running task has ended on it, then freed. Then `compilebench status --retry-failed`
until every cell completed.

At the end every cell completed exactly once, every Parquet file reads, no run or step row is
doubled, the manifest has a job id for every cell and names the job that completed it, and no
array ran more tasks at once than its limit. The faults injected are printed (-s shows them) and
written to chaos-summary.txt in the test's directory; docs/testing.md says what two runs showed.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from tests.helpers import TINY, cli, job_states_from, wait_until
from tests.helpers.slurm.cluster import LocalSlurm

pytestmark = pytest.mark.chaos

CELLS = 200
ARRAY_SIZE = 50
PARALLELISM = 1
SEED = int(os.environ.get("COMPILEBENCH_CHAOS_SEED", "15"))
#: How many times each fault is injected; the driver shuffles them with SEED.
FAULTS = {
    "scancel running": 3,
    "scancel pending": 2,
    "scontrol requeue": 3,
    "kill slurmd": 2,
    "kill slurmctld": 2,
    "fill the filesystem": 2,
}
#: The sweep's filesystem: room for the whole sweep (about 40 MB), little enough to fill at once.
TMPFS_SIZE = "256m"
#: A few CPU seconds per cell (interpreter, torch, one step), two cells at a time on two cores.
SWEEP_DEADLINE_S = 2400
RETRY_ROUNDS = 5

#: The cheapest cell: TINY with one measured step and no warm-up.
CELL = [*(o for o in TINY if not o.startswith(("steps=", "warmup_steps="))), "steps=1", "warmup_steps=0"]
#: A task whose end slurmctld missed (it was killed just then) stays RUNNING, holding its array's
#: only slot, until its time limit: 3 minutes, not the profile's 10.
SWEEP = [
    "cluster=test_slurm",
    *CELL,
    f"seed=range(0,{CELLS})",
    "cluster.time_min=3",
    f"cluster.max_array_size={ARRAY_SIZE}",
    f"cluster.array_parallelism={PARALLELISM}",
]


@pytest.fixture
def small_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of TMPFS_SIZE mounted in the test's directory (needs root, as the local Slurm does)."""
    mount = tmp_path / "fs"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for the sweep: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


class Driver:
    """Injects the faults, one after another in a seeded order, each once its precondition holds
    and once `gap` more tasks have left the queue since the last one; samples the queue meanwhile."""

    def __init__(self, cluster: LocalSlurm, workdir: Path, filesystem: Path, rng: random.Random):
        self.cluster, self.workdir, self.filesystem, self.rng = cluster, workdir, filesystem, rng
        self.log: list[str] = []
        self.counts: Counter[str] = Counter()
        self.most_running: Counter[str] = Counter()
        """Array job id -> the most of its tasks seen running at once."""
        self.started = time.monotonic()

    def tasks(self) -> dict[str, str]:
        """Our tasks in the queue and their states; a look at the queue also samples the throttle."""
        states = job_states_from(self.cluster, self.workdir)
        running = Counter(job.split("_")[0] for job, state in states.items() if state == "RUNNING")
        for array, count in running.items():
            self.most_running[array] = max(self.most_running[array], count)
        return states

    def note(self, fault: str, detail: str) -> None:
        self.counts[fault] += 1
        line = f"[{time.monotonic() - self.started:6.1f}s] {fault}: {detail}"
        self.log.append(line)
        print(line, flush=True)

    def some(self, state: str) -> str:
        """A task of ours in `state` (waited for), chosen by the seeded generator."""
        found = wait_until(
            lambda: sorted(job for job, s in self.tasks().items() if s == state),
            600,
            lambda last: f"no task {state}",
            interval=0.2,
        )
        return self.rng.choice(found)

    def after_tasks_end(self, count: int) -> None:
        """Until `count` more of our tasks have left the queue (or none is left)."""
        before = set(self.tasks())
        wait_until(
            lambda: before - set(self.tasks()),
            900,
            lambda gone: f"only {len(gone)} task(s) ended",
            done=lambda gone: len(gone) >= min(count, len(before)),
            interval=0.5,
        )

    def inject(self, fault: str) -> None:
        if fault in ("scancel running", "scancel pending"):
            job = self.some("RUNNING" if fault == "scancel running" else "PENDING")
            self.cluster.run("scancel", job, check=False)
            self.note(fault, job)
        elif fault == "scontrol requeue":
            job = self.some("RUNNING")
            done = self.cluster.run("scontrol", "requeue", job, check=False)
            self.note(fault, f"{job} ({done.stderr.strip() or 'requeued'})")
        elif fault in ("kill slurmd", "kill slurmctld"):
            self.some("RUNNING")
            daemon = fault.split()[1]
            self.cluster.restart(daemon, signal.SIGKILL)
            self.note(fault, f"SIGKILL, restarted; {len(self.tasks())} task(s) in the queue after it")
        else:
            self.fill()

    def fill(self) -> None:
        """Fill the sweep's filesystem until a task has left the queue (ended) while it was full,
        then free it. Any task: one running at the fill may be one whose end slurmctld missed."""
        self.some("RUNNING")
        queued = set(self.tasks())
        filler = self.filesystem / "filler"
        with open(filler, "wb") as fh:
            try:
                while True:
                    fh.write(b"\0" * (1 << 20))
            except OSError as exc:  # ENOSPC: full
                full = str(exc)
        ended = wait_until(
            lambda: queued - set(self.tasks()), 600, lambda _: "no task ended while full", interval=0.2
        )
        filler.unlink()
        self.note("fill the filesystem", f"{full}; {sorted(ended)} ended while it was full; freed")

    def run(self) -> None:
        faults = [fault for fault, times in FAULTS.items() for _ in range(times)]
        self.rng.shuffle(faults)
        for fault in faults:
            self.after_tasks_end(self.rng.randint(2, 6))
            self.inject(fault)


def run_rows(sweep: Path) -> pd.DataFrame:
    return pd.concat([pd.read_parquet(path) for path in sweep.glob("cells/*/run.parquet")], ignore_index=True)


def until_done(driver: Driver, sweep: Path) -> int:
    """`status --retry-failed` whenever the queue has none of our tasks, until every cell
    completed; returns how many retries it took. The driver's looks at the queue go on sampling
    the throttle."""
    env = driver.cluster.env()
    for retries in range(RETRY_ROUNDS + 1):
        wait_until(
            driver.tasks,
            SWEEP_DEADLINE_S,
            done=lambda left: not left,
            interval=2,
            describe=lambda left: f"{len(left)} task(s) still queued\n{driver.cluster.logs()}",
        )
        status = json.loads(cli(driver.workdir, "status", str(sweep), "--json", env=env).stdout)
        driver.log.append(f"status after {retries} retr(ies): {status['counts']}")
        if status["all_completed"]:
            return retries
        retried = cli(driver.workdir, "status", str(sweep), "--retry-failed", env=env)
        assert retried.returncode == 0, retried.stdout + retried.stderr
    pytest.fail(f"not every cell completed after {RETRY_ROUNDS} retries: {status['counts']}")


@pytest.mark.timeout(SWEEP_DEADLINE_S + 1200)
def test_a_chaotic_queue_completes_every_cell_once(
    slurm_cluster: LocalSlurm, small_filesystem: Path, tmp_path: Path
) -> None:
    sweep = small_filesystem / "sw"
    began = time.monotonic()
    submitted = cli(tmp_path, "sweep", *SWEEP, f"hydra.sweep.dir={sweep}", env=slurm_cluster.env())
    assert submitted.returncode == 0, submitted.stderr
    driver = Driver(slurm_cluster, tmp_path, small_filesystem, random.Random(SEED))
    driver.run()
    retries = until_done(driver, sweep)

    manifest = pd.read_parquet(sweep / "manifest.parquet")
    runs = run_rows(sweep)
    parquet = list(sweep.rglob("*.parquet"))
    unreadable = []
    for path in parquet:
        try:
            pq.read_table(path)
        except Exception as exc:  # pyarrow raises several types for a corrupt file
            unreadable.append(f"{path}: {exc}")
    steps = pd.concat(
        [pd.read_parquet(path) for path in sweep.glob("cells/*/steps.parquet")], ignore_index=True
    )
    leftovers = sorted(str(p.relative_to(sweep)) for p in sweep.rglob(".*.tmp"))
    summary = [
        f"chaos: {CELLS} cells in arrays of {ARRAY_SIZE} (%{PARALLELISM}), seed {SEED}, "
        f"{time.monotonic() - began:.0f} s, {retries} retry round(s)",
        f"faults injected: {dict(driver.counts)}",
        *driver.log,
        f"attempts: {len(runs)}, by status: {dict(Counter(runs['status']))}",
        f"most tasks running at once per array: {dict(driver.most_running)}",
        f"Parquet files: {len(parquet)}, unreadable: {len(unreadable)}; temporary files left: {leftovers}",
    ]
    (tmp_path / "chaos-summary.txt").write_text("\n".join(summary) + "\n")
    print("\n" + "\n".join(summary) + f"\n(written to {tmp_path / 'chaos-summary.txt'})")

    assert dict(driver.counts) == FAULTS
    assert not unreadable, unreadable
    assert sorted(manifest["cell_id"]) == sorted(p.parent.name for p in sweep.glob("cells/*/config.yaml"))
    assert len(manifest) == CELLS
    completed = runs[runs["status"] == "completed"]
    assert Counter(completed["cell_id"]) == Counter({cell: 1 for cell in manifest["cell_id"]})
    assert not runs.duplicated(["cell_id", "attempt"]).any(), runs[
        runs.duplicated(["cell_id", "attempt"], keep=False)
    ]
    doubled = steps.duplicated(["cell_id", "attempt", "step"], keep=False)
    assert not doubled.any(), steps[doubled][["cell_id", "attempt", "step"]]
    jobs = dict(zip(manifest["cell_id"], manifest["job_id"]))
    assert all(isinstance(job, str) and job for job in jobs.values()), jobs
    completed_by = {
        row.cell_id: row.slurm_job_id
        if pd.isna(row.slurm_array_task_id)  # a lone job, not an array
        else f"{row.slurm_job_id}_{row.slurm_array_task_id}"
        for row in completed.itertuples()
    }
    unlisted = {cell: job for cell, job in completed_by.items() if job not in jobs[cell].split()}
    assert not unlisted, f"completed by jobs the manifest does not name: {unlisted}"
    assert max(driver.most_running.values()) <= PARALLELISM, driver.most_running
