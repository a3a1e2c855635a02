"""Slurm executor: the cells of a grid as submitit job arrays, submitted or only planned (--dry-run).

Cells that ask for the same resources (partition, GPU type and count, CPUs, memory, time limit;
see orchestrator/profile.py) share one job array, split so that no array has more than the
profile's `max_array_size` tasks and throttled to `array_parallelism` running tasks (`%N`).
Each task runs `orchestrator.slurm_job.CellJob`, i.e. `python -m workloads.run CONFIG` of
its cell. Cells completed earlier, or whose recorded job is still in the queue, are not submitted.

`sweep()` returns once the arrays are submitted: job ids go to manifest.parquet
(`<array job>_<task>`, or `<job>` for a lone cell, which submitit submits as a plain job) and the
submitted scripts to `SWEEP_DIR/sbatch/<job>.sh`. The manifest is rewritten after each array, and
SIGINT or SIGTERM on the login node is acted on only between arrays (an array whose sbatch has
started is recorded first), so the same command run again submits exactly the cells left over.
A dry run writes the scripts it would submit to `SWEEP_DIR/sbatch/dryrun-NN.sh`, rendered by the
same submitit code, and submits nothing.

Jobs get a clean environment: `SLURM_*`, `SBATCH_*`, `SRUN_*`, `SALLOC_*`, `SUBMITIT_*`, the
torch.distributed variables and the compile-cache variables of the submitting shell are removed
while `sbatch` runs (submitit.helpers.clean_env), except `SLURM_CONF`, which says which cluster
to talk to. `sbatch` exports the rest of the environment to the job as usual.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Collection, Hashable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO, TypeVar

from orchestrator.errors import one_line
from orchestrator.grid import Cell, Grid
from orchestrator.grid_files import record_grid
from orchestrator.private_apis import SUBMISSION_ERRORS
from orchestrator.profile import ProfileError, Resources, SlurmProfile, cell_resources, load_profile
from orchestrator.sbatch import make_executor, script_text, slurm_parameters
from orchestrator.scheduler import partitions, queued_jobs
from workloads.contract.sweep_dir import SBATCH_DIR, cell_dir, missing_repeats, recorded_job_ids
from workloads.instruments.compile_cache import BASE_ENV, INDUCTOR_ENV, TRITON_ENV

DRY_RUN_PREFIX = "dryrun-"
#: Client settings that must survive the clean environment: they say where the cluster is.
KEEP_VARIABLES = ("SLURM_CONF",)

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


class SubmitError(RuntimeError):
    """sbatch refused an array (or is missing); the message is one line for the user."""

    submitted = 0
    """How many arrays of the plan went out before this one failed."""


class SubmissionInterrupted(Exception):
    """SIGINT or SIGTERM came while the arrays were submitted; those submitted before it are in
    the manifest, the others were not submitted. The message is one line for the user."""

    def __init__(self, signum: int, submitted: int, total: int, sweep_dir: Path):
        self.signum, self.submitted, self.total = signum, submitted, total
        super().__init__(
            f"interrupted by {signal.Signals(signum).name}: {submitted} of {total} job array(s) "
            f"submitted, their job ids in {Path(sweep_dir) / 'manifest.parquet'}; "
            "the same command submits the rest"
        )


@dataclass
class JobArray:
    """One sbatch submission: replicates of cells that share resources, at most max_array_size."""

    index: int
    resources: Resources
    tasks: list[tuple[Cell, int]]
    """(cell, repeat) of each array task, in task order."""
    params: dict[str, Any]

    @property
    def dry_run_name(self) -> str:
        return f"{DRY_RUN_PREFIX}{self.index:02d}.sh"


@dataclass
class SlurmPlan:
    grid: Grid
    profile: SlurmProfile
    resources: dict[str, Resources]
    """cell_id -> its resources (every cell of the grid)."""
    skipped: dict[str, str]
    """cell_id -> why it is not submitted (completed, or still queued as job X)."""
    arrays: list[JobArray]
    job_ids: dict[str, str]
    """cell_id -> the last job recorded for it (the manifest's job_id column)."""


def group_arrays(items: Sequence[T], key: Callable[[T], K], max_size: int) -> list[tuple[K, list[T]]]:
    """Items grouped by key (groups in order of first appearance, items in order), each group
    cut into consecutive chunks of at most `max_size` items."""
    if max_size < 1:
        raise ValueError(f"max_size must be >= 1, got {max_size}")
    groups: dict[K, list[T]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return [
        (k, members[i : i + max_size])
        for k, members in groups.items()
        for i in range(0, len(members), max_size)
    ]


def check_grid(grid: Grid) -> tuple[SlurmProfile, dict[str, Resources], dict[Resources, dict[str, Any]]]:
    """Profile, per-cell resources and per-resources sbatch parameters; raises ProfileError
    before anything is written."""
    profile = load_profile(grid.cluster)
    resources = {cell.cell_id: cell_resources(profile, cell.config) for cell in grid.cells}
    params = {
        res: slurm_parameters(profile, res, grid.sweep_dir) for res in dict.fromkeys(resources.values())
    }
    return profile, resources, params


def cells_to_skip(
    grid: Grid, job_ids: dict[str, str], missing: dict[str, list[int]], check_queue: bool = True
) -> dict[str, str]:
    """Cells not to submit again: completed ones (no replicate `missing`), and ones with a recorded
    job still queued (the manifest's job_id lists one job per replicate submitted, space-separated)."""
    skipped = {c.cell_id: "completed" for c in grid.cells if not missing[c.cell_id]}
    pending = {cid: jid for cid, jid in job_ids.items() if cid not in skipped}
    queue = queued_jobs() if pending and check_queue else set()
    for cell_id, jobs in pending.items():
        queued = [job for job in jobs.split() if queue and job in queue]
        if queued:
            skipped[cell_id] = f"queued as {' '.join(queued)}"
    return skipped


def check_partitions(resources: dict[str, Resources]) -> None:
    """ProfileError for a partition the cluster does not have (when sinfo answers at all)."""
    existing = partitions()
    if existing is None:
        return
    for partition in sorted({res.partition for res in resources.values()} - existing):
        raise ProfileError(
            f"partition {partition!r} does not exist on this cluster "
            f"(sinfo lists: {', '.join(sorted(existing))})"
        )


def plan(grid: Grid, query_cluster: bool = True, only: Collection[str] | None = None) -> SlurmPlan:
    """Check the profile (and, with query_cluster, the partitions and the queue) and group the
    cells left to run into arrays; writes nothing (`prepare` before `submit` does). With `only`,
    the other cells are not submitted either (`status --retry-failed`)."""
    profile, resources, params = check_grid(grid)
    if query_cluster:
        check_partitions(resources)
    job_ids = recorded_job_ids(grid.sweep_dir)
    missing = {
        cell.cell_id: missing_repeats(cell_dir(grid.sweep_dir, cell.cell_id), cell.repeats)
        for cell in grid.cells
    }
    skipped = cells_to_skip(grid, job_ids, missing, query_cluster)
    if only is not None:  # a cell completed or queued keeps that reason
        wanted = set(only)
        skipped = {**{c.cell_id: "not selected" for c in grid.cells if c.cell_id not in wanted}, **skipped}
    todo = [
        (cell, repeat)
        for cell, repeat in grid.replicates()
        if cell.cell_id not in skipped and repeat in missing[cell.cell_id]
    ]
    groups = group_arrays(todo, lambda task: resources[task[0].cell_id], profile.max_array_size)
    arrays = [JobArray(i, res, tasks, params[res]) for i, (res, tasks) in enumerate(groups)]
    return SlurmPlan(grid, profile, resources, skipped, arrays, job_ids)


def grid_rows(plan: SlurmPlan) -> list[dict[str, Any]]:
    """The dry-run grid: one row per cell, its axes, resources, array and what happens to it."""
    array_of = {cell.cell_id: array.index for array in plan.arrays for cell, _ in array.tasks}
    return [
        {
            **row,
            **plan.resources[row["cell_id"]].describe(),
            "array": array_of.get(row["cell_id"]),
            "state": plan.skipped.get(row["cell_id"], "submit"),
        }
        for row in plan.grid.rows()
    ]


def write_dry_run(plan: SlurmPlan) -> list[Path]:
    """Write the script of every array that would be submitted to SWEEP_DIR/sbatch/dryrun-NN.sh."""
    directory = Path(plan.grid.sweep_dir) / SBATCH_DIR
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob(f"{DRY_RUN_PREFIX}*.sh"):  # from an earlier dry run of a larger grid
        stale.unlink()
    paths = []
    for array in plan.arrays:
        path = directory / array.dry_run_name
        path.write_text(script_text(plan.grid.sweep_dir, array.params, len(array.tasks)))
        paths.append(path)
    return paths


@contextlib.contextmanager
def clean_submission_env() -> Iterator[None]:
    """os.environ without the submitting shell's job variables while sbatch runs (see module doc)."""
    import submitit.helpers

    keep = {name: os.environ[name] for name in KEEP_VARIABLES if name in os.environ}
    extra = [name for name in os.environ if name.startswith("SALLOC_")] + [BASE_ENV, INDUCTOR_ENV, TRITON_ENV]
    with submitit.helpers.clean_env(extra_names=extra):
        os.environ.update(keep)
        try:
            yield
        finally:
            for name in keep:  # clean_env puts back what it removed, SLURM_CONF included
                os.environ.pop(name, None)


def submit_array(plan: SlurmPlan, array: JobArray) -> list[str]:
    """Submit one array (one sbatch call) and return the job id of each of its tasks."""
    from orchestrator.slurm_job import CellJob

    sweep_dir = Path(plan.grid.sweep_dir)
    try:
        executor = make_executor(sweep_dir, array.params, max_requeue=plan.profile.max_requeue)
    except RuntimeError as exc:  # submitit: 'Could not detect "srun"'
        raise SubmitError(
            f"cannot submit to Slurm from here: {exc} (--dry-run plans without Slurm)"
        ) from None
    cell_ids = [cell.cell_id for cell, _ in array.tasks]
    repeats = [repeat for _, repeat in array.tasks]
    with clean_submission_env():
        try:
            jobs = executor.map_array(CellJob(), [str(sweep_dir)] * len(cell_ids), cell_ids, repeats)
        except (*SUBMISSION_ERRORS, OSError) as exc:
            raise SubmitError(
                f"sbatch refused array {array.index} ({array.resources.partition}): {one_line(exc)}"
            ) from None
    submitted = Path(jobs[0].paths.submission_file)
    base_id = jobs[0].job_id.split("_")[0]
    (sweep_dir / SBATCH_DIR).mkdir(parents=True, exist_ok=True)
    (sweep_dir / SBATCH_DIR / f"{base_id}.sh").write_text(submitted.read_text())
    return [job.job_id for job in jobs]


def _describe(array: JobArray, ids: list[str]) -> str:
    res = array.resources.describe()
    where = ", ".join(str(res[k]) for k in ("partition", "gres") if res[k] != "-")
    extra = ", ".join(
        f"{v} {k}" if k == "cpus" else str(v) for k, v in res.items() if k in ("cpus", "mem", "time") and v
    )
    span = ids[0] if len(ids) == 1 else f"{ids[0].split('_')[0]}_[0-{len(ids) - 1}]"
    return f"{span}: {len(ids)} cell(s) on {where} ({extra})"


@contextlib.contextmanager
def deferred_signals(signums: Sequence[int] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[list[int]]:
    """Within: these signals are only remembered, in the list yielded, for the caller to act on
    where it is safe (Python handlers run in the main thread alone: elsewhere nothing is changed)."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = {signum: signal.signal(signum, lambda got, frame: received.append(got)) for signum in signums}
    try:
        yield received
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def submit(plan: SlurmPlan, out: TextIO | None = None) -> dict[str, str]:
    """Submit every array of the plan; the manifest is rewritten after each, so the job ids of
    what was submitted are kept even when a later sbatch fails (SubmitError is raised then).
    SIGINT and SIGTERM wait for the array being submitted to be recorded, then end the
    submission with SubmissionInterrupted: a job sbatch created but the manifest missed would
    be submitted a second time by the next run of the sweep."""
    out = sys.stdout if out is None else out  # looked up per call: tests and callers redirect it
    job_ids = dict(plan.job_ids)
    ours: dict[str, list[str]] = {}  # the jobs of each cell's replicates submitted now (maybe in two arrays)
    total = len(plan.arrays)
    with deferred_signals() as received:
        for done, array in enumerate(plan.arrays):
            if received:
                raise SubmissionInterrupted(received[0], done, total, plan.grid.sweep_dir)
            try:
                ids = submit_array(plan, array)
            except SubmitError as exc:
                if received:  # a Ctrl-C on the terminal reaches sbatch too, which then fails
                    raise SubmissionInterrupted(received[0], done, total, plan.grid.sweep_dir) from None
                exc.submitted = done
                raise
            for (cell, _), job_id in zip(array.tasks, ids):
                ours.setdefault(cell.cell_id, []).append(job_id)
            job_ids.update({cell_id: " ".join(jobs) for cell_id, jobs in ours.items()})
            record_grid(plan.grid, job_ids)
            print(f"submitted {_describe(array, ids)}", file=out, flush=True)
        if received:  # during the last array: all is submitted, but the caller asked to stop (no --wait)
            raise SubmissionInterrupted(received[0], total, total, plan.grid.sweep_dir)
    return job_ids
