"""The Slurm executor's plan: which cells go into which job array, and the dry run's scripts.

Cells that ask for the same resources (partition, GPU type and count, CPUs, memory, time limit;
see orchestrator/grid/profile.py) share one job array, split so that no array has more than the
profile's `max_array_size` tasks and throttled to `array_parallelism` running tasks (`%N`).
Each task runs `orchestrator.executors.slurm.job.CellJob`, i.e. `python -m workloads.run CONFIG`
of its cell; with `cluster.cells_per_task=N` (orchestrator/executors/slurm/packing.py) each task
runs N replicates in turn (`orchestrator.executors.slurm.packed_task.PackedTask`) and asks for N x
`time_min`, which must not be more than the partition's time limit (as sinfo says). Cells completed
earlier, or whose recorded job is still in the queue, are not submitted.

A dry run writes the scripts it would submit to `SWEEP_DIR/sbatch/dryrun-NN.sh`, rendered by the
same submitit code (orchestrator/executors/slurm/sbatch.py), and submits nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from orchestrator.executors.slurm.packing import pack, place_state
from orchestrator.executors.slurm.sbatch import script_text, slurm_parameters
from orchestrator.executors.slurm.scheduler import SLURM_STATES, partition_limits, queued_jobs
from orchestrator.grid.cells import Cell, Grid
from orchestrator.grid.files import stopped
from orchestrator.grid.profile import ProfileError, Resources, SlurmProfile, cell_resources, load_profile
from workloads.cell.support import plan_refusal
from workloads.contract.attempts import missing_repeats
from workloads.contract.sweep_dir import SBATCH_DIR, cell_dir, read_task_place, recorded_job_ids
from workloads.contract.vocabulary import PENDING, QUEUED

DRY_RUN_PREFIX = "dryrun-"

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


@dataclass
class JobArray:
    """One sbatch submission: replicates of cells that share resources, at most max_array_size tasks."""

    index: int
    resources: Resources
    tasks: list[list[tuple[Cell, int]]]
    """The (cell, repeat) replicates of each array task, in task order and, within one, run order."""
    params: dict[str, Any]
    packed: bool = False
    """Its tasks run `cluster.cells_per_task` > 1 replicates each: their job ids name their place."""

    @property
    def dry_run_name(self) -> str:
        return f"{DRY_RUN_PREFIX}{self.index:02d}.sh"

    @property
    def replicates(self) -> list[tuple[Cell, int]]:
        return [replicate for task in self.tasks for replicate in task]


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
    a_round: bool = False
    """Replicates its caller chose (a round of repeats=auto): submitted without a summary line."""

    @property
    def cells_submitted(self) -> int:
        return sum(len(array.replicates) for array in self.arrays)

    @property
    def packed(self) -> bool:
        return any(array.packed for array in self.arrays)


def group_arrays(items: Sequence[T], key: Callable[[T], K], max_size: int) -> list[tuple[K, list[T]]]:
    """Items grouped by key (groups in order of first appearance, items in order), each group
    cut into consecutive chunks of at most `max_size` items."""
    if max_size < 1:
        raise ValueError(f"max_size must be >= 1, got {max_size}")
    groups: dict[K, list[T]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return [(k, chunk) for k, members in groups.items() for chunk in pack(members, max_size)]


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
    job still queued (the manifest's job_id lists one job per replicate submitted, space-separated;
    a packed replicate's is queued while its task has not yet moved past its place)."""
    skipped = {c.cell_id: "completed" for c in grid.cells if not missing[c.cell_id]}
    pending = {cid: jid for cid, jid in job_ids.items() if cid not in skipped}
    queue = (queued_jobs() if pending and check_queue else None) or {}

    def queued(job: str) -> bool:
        state = place_state(job, queue, lambda task: read_task_place(grid.sweep_dir, task))
        return state is not None and SLURM_STATES.get(state, PENDING) in QUEUED  # as squeue lists it

    for cell_id, jobs in pending.items():
        if in_queue := [job for job in jobs.split() if queued(job)]:
            skipped[cell_id] = f"queued as {' '.join(in_queue)}"
    return skipped


def check_partitions(resources: dict[str, Resources], arrays: list[JobArray]) -> None:
    """ProfileError for a partition the cluster does not have, or an array whose tasks ask for more
    time than their partition allows (when sinfo answers at all)."""
    limits = partition_limits()
    if limits is None:
        return
    for partition in sorted({res.partition for res in resources.values()} - set(limits)):
        raise ProfileError(
            f"partition {partition!r} does not exist on this cluster "
            f"(sinfo lists: {', '.join(sorted(limits))})"
        )
    for array in arrays:
        limit, res = limits[array.resources.partition], array.resources
        if limit is not None and array.params["time"] > limit:
            cells = max(len(task) for task in array.tasks)
            raise ProfileError(
                f"a task of {cells} cell(s) x time_min {res.time_min} = {array.params['time']} min is more "
                f"than partition {res.partition!r} allows ({limit} min, sinfo); lower "
                f"cluster.{'cells_per_task' if cells > 1 else 'time_min'}"
            )


def cells_per_task(profile: SlurmProfile, resources: Resources) -> int:
    """How many replicates share a task of these resources: the profile's `cells_per_task`, but one
    for a cell of several processes (srun runs a task once per rank)."""
    return 1 if resources.tasks > 1 else profile.cells_per_task


def job_arrays(
    todo: list[tuple[Cell, int]],
    resources: dict[str, Resources],
    profile: SlurmProfile,
    params: dict[Resources, dict[str, Any]],
) -> list[JobArray]:
    """The replicates to run, grouped by resources, packed `cells_per_task` to a task, the tasks cut
    into arrays of at most `max_array_size`; an array's time limit is its fullest task's."""
    by_resources = group_arrays(todo, lambda replicate: resources[replicate[0].cell_id], max(1, len(todo)))
    tasks = [task for res, group in by_resources for task in pack(group, cells_per_task(profile, res))]
    arrays = group_arrays(tasks, lambda task: resources[task[0][0].cell_id], profile.max_array_size)
    return [
        JobArray(
            index,
            res,
            chunk,
            {**params[res], "time": res.time_min * max(len(task) for task in chunk)},
            packed=cells_per_task(profile, res) > 1,
        )
        for index, (res, chunk) in enumerate(arrays)
    ]


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
    arrays = job_arrays(todo, resources, profile, params)
    if query_cluster:
        check_partitions(resources, arrays)
    return SlurmPlan(
        grid,
        profile,
        resources,
        skipped,
        arrays,
        job_ids,
        retrying=only is not None,
        a_round=replicates is not None,
    )


def grid_rows(plan: SlurmPlan) -> list[dict[str, Any]]:
    """The dry-run grid: one row per cell, its axes, resources, array and what happens to it; in a
    packed plan also `task`, the `<task>.<place>` of each of its replicates."""
    array_of = {cell.cell_id: array.index for array in plan.arrays for cell, _ in array.replicates}
    places: dict[str, list[str]] = {}
    for array in plan.arrays:
        for number, task in enumerate(array.tasks):
            for place, (cell, _) in enumerate(task):
                places.setdefault(cell.cell_id, []).append(f"{number}.{place}")
    return [
        {
            **row,
            **plan.resources[row["cell_id"]].describe(),
            "array": array_of.get(row["cell_id"]),
            **({"task": " ".join(places.get(row["cell_id"], []))} if plan.packed else {}),
            "state": plan.skipped.get(row["cell_id"], "submit"),
        }
        for row in plan.grid.rows()
    ]


def describe_packing(plan: SlurmPlan) -> str:
    """` (6 cell(s) per task; array 0: 4 task(s) of 60 min, ...)` for a packed plan, '' for another."""
    if not plan.packed:
        return ""
    arrays = ", ".join(
        f"array {a.index}: {len(a.tasks)} task(s) of {a.params['time']} min" for a in plan.arrays
    )
    return f" ({plan.profile.cells_per_task} cell(s) per task; {arrays})"


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
