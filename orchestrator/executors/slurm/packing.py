"""Several cells to one Slurm array task (`cluster.cells_per_task`): which replicates share a task,
the job id of each one's place in it, and the state of a place while its task is in the queue.

A packed task runs its replicates one after another through the local executor's runner
(orchestrator/executors/slurm/packed_task.py). Each keeps a job id of its own, `<the task's job id>.<place>`:
`123_4.2` is the third replicate (place 2) of task 4 of array 123, `125.0` the first of a task
submitted alone (submitit submits a lone task as a plain job). The manifest records these as any
job id. While the task runs, it records the place that has the device (`write_task_place`,
workloads/contract/sweep_dir.py): the places before it have ended, those after it still pend.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from orchestrator.executors.slurm.scheduler import SLURM_STATES
from workloads.contract.vocabulary import RUNNING

T = TypeVar("T")

#: Between a task's job id and a place in it. Slurm names a job's steps so too (`123_4.0`), but
#: never records a step as a job of the manifest, nor does compilebench ask Slurm for one.
PLACE_SEP = "."


def pack(items: Sequence[T], per_task: int) -> list[list[T]]:
    """The items in order, cut into tasks of `per_task` (the last one may hold fewer)."""
    return [list(items[i : i + per_task]) for i in range(0, len(items), per_task)]


def place_job_id(task_job_id: str, place: int) -> str:
    """The job id of the replicate at `place` of a packed task."""
    return f"{task_job_id}{PLACE_SEP}{place}"


def split_place(job_id: str) -> tuple[str, int | None]:
    """(the task's job id, the place) of a packed replicate's job id; (job_id, None) for any other."""
    task, sep, place = job_id.rpartition(PLACE_SEP)
    return (task, int(place)) if sep and place.isdigit() else (job_id, None)


def place_state(
    job_id: str, task_states: Mapping[str, str], task_place: Callable[[str], int | None]
) -> str | None:
    """The Slurm state that speaks for one job id: its task's, but a running packed task's place
    pends until the task's runner gives it the device (`task_place`: the place that has it, None
    before the first), runs while it has it, and is `COMPLETED` (its job, the place, is done)
    once the task has moved past it. None where the task is unknown."""
    task, place = split_place(job_id)
    state = task_states.get(task)
    if place is None or state is None or SLURM_STATES.get(state) != RUNNING:
        return state
    now = task_place(task)
    if now is None or place > now:
        return "PENDING"
    return "RUNNING" if place == now else "COMPLETED"
