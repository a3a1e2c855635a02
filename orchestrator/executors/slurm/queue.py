"""Where a sweep's Slurm jobs are, in the project's words: the Slurm executor's `poll`.

`squeue` answers for the jobs the controller still knows (pending, running, and those that ended a
few minutes ago), then `sacct` for the others where accounting exists (`job_states`,
orchestrator/executors/slurm/scheduler.py: every call has a short timeout, and a `sacct` that is
missing or reports accounting storage disabled is simply not used). Slurm's state becomes the
cell's (`SLURM_STATES`): a job that left no result is lost when its node died (NODE_FAIL, for a job
that may not be requeued; one that may is pending again). A job neither knows is GONE (the
controller forgot it; also an array task cancelled while it still pended together with other tasks
of its array: Slurm 22.05 keeps no record of it, in squeue or sacct); every job is unknown when
squeue cannot be asked.

A packed replicate (job id `<task>.<place>`, orchestrator/executors/slurm/packing.py) pends until
its task gives its place the device and runs while it has it; one its task ended without, or went
past, is lost.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

from orchestrator.executors.base import GONE, JobState
from orchestrator.executors.slurm.packing import place_state, split_place
from orchestrator.executors.slurm.scheduler import SLURM_STATES, job_states
from workloads.contract.sweep_dir import read_task_place
from workloads.contract.vocabulary import LOST, QUEUED, UNKNOWN

#: Where squeue could not be asked, and a job that neither squeue nor sacct knows.
UNANSWERED = JobState(UNKNOWN, "squeue did not answer")
FORGOTTEN = JobState(GONE, "job unknown to squeue/sacct, no result")


def poll_jobs(sweep_dir: Path, job_ids: Sequence[str]) -> dict[str, JobState]:
    """Each of these job ids (a packed replicate's too) of the sweep in `sweep_dir` as a JobState."""
    tasks = job_states(list(dict.fromkeys(split_place(job)[0] for job in job_ids)))
    if tasks is None:
        return dict.fromkeys(job_ids, UNANSWERED)
    place_of = functools.cache(lambda task: read_task_place(sweep_dir, task))
    return {job: _in_words(job, place_state(job, tasks, place_of)) for job in job_ids}


def _in_words(job_id: str, slurm: str | None) -> JobState:
    """The JobState of one job whose Slurm state (its place's, for a packed replicate) is `slurm`."""
    if slurm is None:
        return FORGOTTEN
    state = SLURM_STATES.get(slurm, slurm.lower())
    if state in QUEUED:
        return JobState(state)
    task, place = split_place(job_id)
    if place is not None:  # its task ended, or went on, without it
        return JobState(LOST, f"no result from task {task} (see logs/)")
    return JobState(state, f"job {slurm}, no result (see logs/)")
