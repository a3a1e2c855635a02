"""How a sweep's cells run: one `Executor` interface, chosen once from the cluster profile.

As submitit's executors, an executor runs or submits what it is given, and as ReFrame's schedulers,
it says where its jobs are when polled; waiting is the policy of its caller, the sweep driver
(orchestrator/sweep/driver.py), which speaks to this interface alone and never asks which executor
it has. `check` and `plan` check the grid and decide
what runs (raising `ExecutorError`, one line, before anything is written), `rows` is the dry-run
table, `dry_run` writes what a dry run writes, `run` runs or submits the plan's replicates and says
what it did (`Ran`), and `poll` says where the jobs it submitted are (`JobState`, in the project's
words: the scheduler's own are the executor's alone), which `status` and `sweep --wait`
(orchestrator/executors/status.py) ask it. The local executor runs the replicates here, one after
another, and returns when they have run (orchestrator/executors/local.py); the Slurm executor submits
job arrays and asks the scheduler (orchestrator/executors/slurm/). Both start each cell as its own
process (orchestrator/executors/cell_process.py).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

if TYPE_CHECKING:  # cells imports the vocabulary (~180 ms): not at the CLI's start
    from orchestrator.executors.cell_process import Outcome
    from orchestrator.grid.cells import Cell, Grid

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

#: Default seconds between two looks at the queue while `sweep --wait` follows a sweep (after the
#: first, which comes at once): submitit's guidance for a shared scheduler is at least 30 s.
WAIT_INTERVAL_S = 30.0
#: Default seconds `sweep --wait` goes on following while the queue does not answer (cells `unknown`).
UNANSWERED_LIMIT_S = 120.0

#: A job's state when the queue has no record of it (`JobState`); its cell, without a result, is lost.
GONE = "gone"

PlanT = TypeVar("PlanT")


class ExecutorError(ValueError):
    """A grid this executor cannot run (bad profile, partition, a distributed cell run locally):
    one line for the user, nothing written or submitted."""


@dataclass(frozen=True)
class Follow:
    """`sweep --wait`: follow the submitted jobs until none is queued (a local run is in the foreground
    anyway), a look every `poll_s`, giving up once the queue has not answered for `give_up_s`."""

    poll_s: float = WAIT_INTERVAL_S
    give_up_s: float = UNANSWERED_LIMIT_S


@dataclass(frozen=True)
class JobState:
    """Where one job is, as its executor's `poll` says, in the project's words."""

    state: str
    """pending or running (QUEUED); else how it ended, for a cell it left without a result (failed,
    timeout, cancelled, oom, lost); GONE when the queue has no record of it; unknown when the queue
    could not be asked (workloads/contract/vocabulary.py)."""
    error: str | None = None
    """What the cell's row says when the job left it without a result, in the executor's words (the
    Slurm executor's: orchestrator/executors/slurm/queue.py)."""


@dataclass(frozen=True)
class Ran:
    """What `Executor.run` did."""

    code: int = EXIT_OK
    """EXIT_OK, or why it stopped short: a submission that failed (1; 130 or 143 for a signal while
    arrays were submitted)."""
    outcomes: list[Outcome] = field(default_factory=list)
    """The outcome of each replicate it ran here, in the foreground."""


class Executor(ABC, Generic[PlanT]):
    """Plans and runs the cells of a grid; one per sweep, from `executors.executor_for`."""

    name: ClassVar[str]
    foreground: ClassVar[bool] = False
    """Whether `run` returns once the replicates have run here (local), not once they are submitted."""
    queue_name: ClassVar[str] = "the queue"
    """What its queue is called where `sweep --wait` gives up on it: `<queue_name> has not answered
    for 120 s`."""

    def check(self, grid: Grid) -> None:
        """Raise ExecutorError for settings of `grid` this executor cannot use, without asking the
        cluster (`sweep --smoke` checks the whole sweep so before it runs the smoke grid here)."""

    @abstractmethod
    def plan(
        self,
        grid: Grid,
        only: Collection[str] | None = None,
        replicates: Sequence[tuple[Cell, int]] | None = None,
    ) -> PlanT:
        """What runs of `grid`: its replicates not completed before (`Grid.replicates`; with `only`, of
        those cells: `status --retry-failed`; `replicates`: these, a round of repeats=auto); raises
        ExecutorError for a grid this executor cannot run. Writes nothing."""

    @abstractmethod
    def rows(self, plan: PlanT) -> list[dict[str, Any]]:
        """The dry-run table: one row per cell."""

    @abstractmethod
    def dry_run(self, plan: PlanT) -> str:
        """Write what a dry run writes (Slurm: the scripts) and say so in one line."""

    @abstractmethod
    def run(self, plan: PlanT) -> Ran:
        """Run or submit the plan's replicates into the prepared sweep directory, printing progress;
        the caller follows the submitted jobs through `poll` if it waits (`Follow`)."""

    @abstractmethod
    def poll(self, sweep_dir: Path, job_ids: Sequence[str]) -> dict[str, JobState]:
        """Where each of these jobs of the sweep (ids as `run` recorded them in the manifest) is now:
        one `JobState` per id asked. Never hangs: a queue that cannot be asked answers unknown."""
