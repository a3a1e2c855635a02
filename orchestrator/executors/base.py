"""How a sweep's cells run: one `Executor` interface, chosen once from the cluster profile.

As submitit's executors, an executor runs or submits what it is given and waits only if asked; the
policy is its caller's, the sweep driver (orchestrator/sweep/driver.py), which speaks to this
interface alone and never asks which executor it has. `check` and `plan` check the grid and decide
what runs (raising `ExecutorError`, one line, before anything is written), `rows` is the dry-run
table, `dry_run` writes what a dry run writes, `run` runs or submits the plan's replicates (and
waits, if asked) and says what it did (`Ran`). The local executor runs the replicates here, one
after another, and returns when they have run (orchestrator/executors/local.py); the Slurm executor submits
job arrays (orchestrator/executors/slurm/executor.py). Both start each cell as its own process
(orchestrator/executors/cell_process.py).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

if TYPE_CHECKING:  # cells imports the vocabulary (~180 ms), status pandas: not at the CLI's start
    from orchestrator.executors.cell_process import Outcome
    from orchestrator.executors.status import CellStatus
    from orchestrator.grid.cells import Cell, Grid

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

PlanT = TypeVar("PlanT")


class ExecutorError(ValueError):
    """A grid this executor cannot run (bad profile, partition, a distributed cell run locally):
    one line for the user, nothing written or submitted."""


@dataclass(frozen=True)
class Follow:
    """`sweep --wait`: follow the submitted jobs until none is queued (a local run is in the foreground
    anyway). None means the scheduler module's defaults."""

    poll_s: float | None = None
    give_up_s: float | None = None


@dataclass(frozen=True)
class Ran:
    """What `Executor.run` did."""

    code: int = EXIT_OK
    """EXIT_OK, or why it stopped short: a submission that failed (1; 130 or 143 for a signal while
    arrays were submitted), Ctrl-C while waiting (130)."""
    outcomes: list[Outcome] = field(default_factory=list)
    """The outcome of each replicate it ran here, in the foreground."""
    states: list[CellStatus] | None = None
    """Where it waited (`Follow`) until no cell was queued: each cell's state at the last look."""


class Executor(ABC, Generic[PlanT]):
    """Plans and runs the cells of a grid; one per sweep, from `executors.executor_for`."""

    name: ClassVar[str]
    foreground: ClassVar[bool] = False
    """Whether `run` returns once the replicates have run here (local), not once they are submitted."""

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
    def run(self, plan: PlanT, wait: Follow | None = None) -> Ran:
        """Run or submit the plan's replicates into the prepared sweep directory, printing progress;
        with `wait`, then follow them until none is queued."""
