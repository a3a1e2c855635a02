"""Submitting a Slurm plan (orchestrator/executors/slurm/executor.py): one sbatch call (submitit's
`map_array`) per job array, the manifest rewritten after each.

SIGINT or SIGTERM on the login node is acted on only between arrays (an array whose sbatch has
started is recorded first), so the same command run again submits exactly the cells left over.
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
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from orchestrator.executors.base import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from orchestrator.executors.slurm.packing import place_job_id
from orchestrator.executors.slurm.sbatch import make_executor
from orchestrator.grid.errors import one_line
from orchestrator.grid.files import record_grid
from orchestrator.grid.private_apis import SUBMISSION_ERRORS
from workloads.contract.sweep_dir import SBATCH_DIR
from workloads.instruments.compile_cache import BASE_ENV, INDUCTOR_ENV, TRITON_ENV

if TYPE_CHECKING:
    from orchestrator.executors.slurm.plan import JobArray, SlurmPlan

#: Client settings that must survive the clean environment: they say where the cluster is.
KEEP_VARIABLES = ("SLURM_CONF",)


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
    from orchestrator.executors.slurm.job import CellJob
    from orchestrator.executors.slurm.packed_task import PackedTask, TaskCell

    sweep_dir = Path(plan.grid.sweep_dir)
    try:
        executor = make_executor(sweep_dir, array.params, max_requeue=plan.profile.max_requeue)
    except RuntimeError as exc:  # submitit: 'Could not detect "srun"'
        raise SubmitError(
            f"cannot submit to Slurm from here: {exc} (--dry-run plans without Slurm)"
        ) from None
    sweeps = [str(sweep_dir)] * len(array.tasks)
    if array.packed:
        calls = [[(TaskCell.of(cell), repeat) for cell, repeat in task] for task in array.tasks]
        function, arguments = PackedTask(), [sweeps, calls]
    else:
        ids = [cell.cell_id for cell, _ in array.replicates]  # one replicate to a task
        function, arguments = CellJob(), [sweeps, ids, [repeat for _, repeat in array.replicates]]
    with clean_submission_env():
        try:
            jobs = executor.map_array(function, *arguments)
        except (*SUBMISSION_ERRORS, OSError) as exc:
            raise SubmitError(
                f"sbatch refused array {array.index} ({array.resources.partition}): {one_line(exc)}"
            ) from None
    submitted = Path(jobs[0].paths.submission_file)
    base_id = jobs[0].job_id.split("_")[0]
    (sweep_dir / SBATCH_DIR).mkdir(parents=True, exist_ok=True)
    (sweep_dir / SBATCH_DIR / f"{base_id}.sh").write_text(submitted.read_text())
    return [job.job_id for job in jobs]


def replicate_job_ids(array: JobArray, task_ids: list[str]) -> list[str]:
    """The job id of each replicate of the array, in `array.replicates` order: its task's, or in a
    packed array its task's with its place (orchestrator/executors/slurm/packing.py)."""
    if not array.packed:
        return task_ids
    return [
        place_job_id(task_id, place)
        for task_id, task in zip(task_ids, array.tasks)
        for place in range(len(task))
    ]


def _describe(array: JobArray, ids: list[str]) -> str:
    """`123_[0-3]: 24 cell(s) in 4 task(s) on grete:shared, gpu:A100:1 (16 cpus, 120G, 360 min)`;
    `ids`: the tasks' job ids, the time a task's."""
    res = {**array.resources.describe(), "time": f"{array.params['time']} min"}
    where = ", ".join(str(res[k]) for k in ("partition", "gres") if res[k] != "-")
    extra = ", ".join(
        f"{v} {k}" if k == "cpus" else str(v) for k, v in res.items() if k in ("cpus", "mem", "time") and v
    )
    span = ids[0] if len(ids) == 1 else f"{ids[0].split('_')[0]}_[0-{len(ids) - 1}]"
    tasks = f" in {len(ids)} task(s)" if array.packed else ""
    return f"{span}: {len(array.replicates)} cell(s){tasks} on {where} ({extra})"


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
            for (cell, _), job_id in zip(array.replicates, replicate_job_ids(array, ids)):
                ours.setdefault(cell.cell_id, []).append(job_id)
            job_ids.update({cell_id: " ".join(jobs) for cell_id, jobs in ours.items()})
            record_grid(plan.grid, job_ids)
            print(f"submitted {_describe(array, ids)}", file=out, flush=True)
        if received:  # during the last array: all is submitted, but the caller asked to stop (no --wait)
            raise SubmissionInterrupted(received[0], total, total, plan.grid.sweep_dir)
    return job_ids


def submit_plan(plan: SlurmPlan) -> int:
    """Submit a plan's arrays; the exit code, and on an sbatch failure one line of what was submitted."""
    try:
        submit(plan)
    except SubmissionInterrupted as exc:
        print(f"\n{exc}", file=sys.stderr)
        return 128 + exc.signum
    except SubmitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        if exc.submitted:
            print(
                f"{exc.submitted} array(s) were submitted before; their job ids are in "
                f"{plan.grid.sweep_dir}/manifest.parquet",
                file=sys.stderr,
            )
        return EXIT_FAILED if exc.submitted else EXIT_USAGE
    return EXIT_OK
