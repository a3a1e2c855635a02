"""The Slurm executor's plan: which cells go into which job array, and the dry run's scripts.

Cells that ask for the same resources (partition, GPU type and count, CPUs, memory, time limit;
see orchestrator/profile.py) share one job array, split so that no array has more than the
profile's `max_array_size` tasks and throttled to `array_parallelism` running tasks (`%N`).
Each task runs `orchestrator.slurm_job.CellJob`, i.e. `python -m workloads.run CONFIG` of
its cell. Cells completed earlier, or whose recorded job is still in the queue, are not submitted.

A dry run writes the scripts it would submit to `SWEEP_DIR/sbatch/dryrun-NN.sh`, rendered by the
same submitit code (orchestrator/sbatch.py), and submits nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from orchestrator.auto_repeats import stopped
from orchestrator.grid import Cell, Grid
from orchestrator.profile import ProfileError, Resources, SlurmProfile, cell_resources, load_profile
from orchestrator.sbatch import script_text, slurm_parameters
from orchestrator.scheduler import partitions, queued_jobs
from workloads.cell.support import plan_refusal
from workloads.contract.sweep_dir import SBATCH_DIR, cell_dir, missing_repeats, recorded_job_ids

DRY_RUN_PREFIX = "dryrun-"

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


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
    retrying: bool = False
    """Only the cells `status --retry-failed` chose: the sweep's files are there already."""

    @property
    def cells_submitted(self) -> int:
        return sum(len(array.tasks) for array in self.arrays)


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
    for cell in grid.cells:
        refusal = plan_refusal(cell.config["precision"]["name"], gpu_type=resources[cell.cell_id].gpu_type)
        if refusal:
            raise ProfileError(f"cell {cell.cell_id} ({cell.config['model']['name']}): {refusal}")
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


def plan(
    grid: Grid,
    query_cluster: bool = True,
    only: Collection[str] | None = None,
    replicates: Sequence[tuple[Cell, int]] | None = None,
) -> SlurmPlan:
    """Check the profile (and, with query_cluster, the partitions and the queue) and group the
    cells left to run into arrays; writes nothing (`prepare` before `submit` does). With `only`,
    the other cells are not submitted either (`status --retry-failed`); `replicates`: these, not
    `Grid.replicates` (a round of repeats=auto)."""
    profile, resources, params = check_grid(grid)
    if query_cluster:
        check_partitions(resources)
    job_ids = recorded_job_ids(grid.sweep_dir)
    missing = {
        cell.cell_id: []
        if cell.auto and stopped(grid.sweep_dir, cell)
        else missing_repeats(cell_dir(grid.sweep_dir, cell.cell_id), cell.repeats)
        for cell in grid.cells
    }
    skipped = cells_to_skip(grid, job_ids, missing, query_cluster)
    if only is not None:  # a cell completed or queued keeps that reason
        wanted = set(only)
        skipped = {**{c.cell_id: "not selected" for c in grid.cells if c.cell_id not in wanted}, **skipped}
    todo = [
        (cell, repeat)
        for cell, repeat in (grid.replicates() if replicates is None else replicates)
        if cell.cell_id not in skipped and repeat in missing[cell.cell_id]
    ]
    groups = group_arrays(todo, lambda task: resources[task[0].cell_id], profile.max_array_size)
    arrays = [JobArray(i, res, tasks, params[res]) for i, (res, tasks) in enumerate(groups)]
    return SlurmPlan(grid, profile, resources, skipped, arrays, job_ids, retrying=only is not None)


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
