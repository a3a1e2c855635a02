"""What one packed Slurm array task runs (`cluster.cells_per_task` > 1): `PackedTask()(sweep_dir,
replicates)`, called by submitit in the job.

The task runs its replicates one after another exactly as a local sweep runs its own
(orchestrator/executors/local.py, `run_replicates`): each its own `python -m workloads.run` process, the next
ones started ahead and waiting for their turn, a replicate completed by an earlier attempt of the
task skipped. All of them use the compile cache the job's script exported (`cluster.compile_cache`:
per_job, the task's own directory; shared, the sweep's), so a later cell compiles warm from what an
earlier one compiled. Each cell keeps its own record, as in a task of one: its run rows and logs,
its job id `<task>.<place>` (orchestrator/executors/slurm/packing.py), and
`logs/slurm-<task>.<place>.out`/`.err`/`.env` beside them. Before each turn the task records the place
that gets it (`write_task_place`), from which `status` tells each cell's own state while the task runs.

Faults, each recorded per cell:

- Time limit or preemption (Slurm's USR2, which reaches every process of the step): the cell with
  the turn records `timeout`; `checkpoint` waits for that record and hands submitit the same call,
  which requeues the task (up to `cluster.max_requeue`). The processes started ahead never had the
  device and are killed unrecorded. The requeued task runs only what has not completed: the
  interrupted cell again, and the ones it never reached.
- SIGTERM (scancel, or the limit reached without USR2): the cell with the turn records `cancelled`,
  and the task gives no more turns (TaskStopped); the cells it never reached have no result and,
  their task gone, are `lost`.
- A cell that does not complete ends the task FAILED (CellFailed) after the others have run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.executors.cell_process import CellProcess, Outcome
from orchestrator.executors.local import run_replicates
from orchestrator.executors.slurm.job import RECORD_WAIT_S, CellFailed, live_children, record_job
from orchestrator.grid.cells import Cell
from workloads.contract.attempts import newest_attempt
from workloads.contract.sweep_dir import LOGS_DIR, cell_dir, write_task_place


@dataclass(frozen=True)
class TaskCell:
    """What a task's runner needs of a cell: its id, the label of its progress line, its replicates
    (orchestrator.grid.cells.Cell would import the vocabulary, and Hydra came with it, into the task)."""

    cell_id: str
    label: str
    repeats: int
    auto: bool = False
    """repeats=auto: the progress line says so (the task runs the replicates fixed at submission)."""

    @classmethod
    def of(cls, cell: Cell) -> TaskCell:
        return cls(cell.cell_id, cell.label, cell.repeats, cell.auto)


class TaskStopped(RuntimeError):
    """SIGTERM reached the task (scancel, or its time limit without the warning): no more turns."""


class PackedTask:
    """What a packed task runs (submitit pickles it); module doc."""

    def __init__(self) -> None:
        self._turn: tuple[Path, int, CellProcess] | None = None
        """The directory of the cell that has the turn, its attempts before it, its process."""
        self._stopping = False

    def __call__(self, sweep_dir: str, replicates: list[tuple[TaskCell, int]]) -> list[Outcome]:
        import submitit  # in the job only

        sweep, task = Path(sweep_dir), submitit.JobEnvironment().job_id
        write_task_place(sweep, task, -1)  # none yet: also after a requeue
        for place, (cell, _) in enumerate(replicates):
            logs = cell_dir(sweep, cell.cell_id) / LOGS_DIR
            logs.mkdir(parents=True, exist_ok=True)
            record_job(logs, place)
        signal.signal(signal.SIGTERM, self._on_sigterm)  # instead of submitit's, which ignores it
        print(f"task {task}: {len(replicates)} cell(s) in turn", flush=True)

        def on_turn(place: int, started: CellProcess) -> None:
            if self._stopping:
                raise TaskStopped(f"task {task}: SIGTERM; cells from place {place} on not run")
            directory = cell_dir(sweep, replicates[place][0].cell_id)
            self._turn = (directory, newest_attempt(directory)[0], started)
            write_task_place(sweep, task, place)

        outcomes = run_replicates(sweep, replicates, None, on_turn=on_turn)
        write_task_place(sweep, task, len(replicates))  # past the last place: each has ended
        failed = [f"{o.cell_id} {o.status}" for o in outcomes if not o.ok]
        if failed:
            raise CellFailed(
                f"{len(failed)} of {len(outcomes)} cell(s) did not complete: {', '.join(failed)}"
            )
        return outcomes

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self._stopping = True
        print("task: SIGTERM, no more turns after the cell that has one", flush=True)

    def checkpoint(self, sweep_dir: str, replicates: list[tuple[TaskCell, int]]) -> Any:
        """Called by submitit on SIGUSR2: let the cell that has the turn record its `timeout`
        (forwarding the signal in case Slurm's did not reach it), then requeue the same call."""
        from submitit.helpers import DelayedSubmission

        if self._turn is not None:
            directory, attempts, started = self._turn
            with contextlib.suppress(ProcessLookupError):
                os.kill(started.process.pid, signal.SIGUSR2)
            deadline = time.monotonic() + RECORD_WAIT_S
            while (
                newest_attempt(directory)[0] <= attempts
                and started.process.pid in live_children()
                and time.monotonic() < deadline
            ):
                time.sleep(0.2)
        return DelayedSubmission(PackedTask(), sweep_dir, replicates)
