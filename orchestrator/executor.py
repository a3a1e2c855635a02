"""How a sweep's cells run: one `Executor` interface, chosen once from the cluster profile.

As submitit's executors: the command line speaks to this interface alone and never asks which
executor it has. `plan` checks the grid and decides what runs (raising `ExecutorError`, one line,
before anything is written), `rows` is the dry-run table, `dry_run` writes what a dry run writes,
`run` runs or submits the plan and returns the exit code. The local executor runs the cells here,
one after another (orchestrator/local.py); the Slurm executor submits job arrays
(orchestrator/slurm.py). Both start each cell as its own process (orchestrator/cell_process.py).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

if TYPE_CHECKING:  # cells imports the vocabulary (~180 ms): not at the CLI's start
    from orchestrator.cells import Grid

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


class Executor(ABC, Generic[PlanT]):
    """Plans and runs the cells of a grid; one per sweep, from `executors.executor_for`."""

    name: ClassVar[str]

    def check(self, grid: Grid) -> None:
        """Raise ExecutorError for settings of `grid` this executor cannot use, without asking the
        cluster (`sweep --smoke` checks the whole sweep so before it runs the smoke grid here)."""

    @abstractmethod
    def plan(self, grid: Grid, only: Collection[str] | None = None) -> PlanT:
        """What runs of `grid` (with `only`, of those cells: `status --retry-failed`); raises
        ExecutorError for a grid this executor cannot run. Writes nothing."""

    @abstractmethod
    def rows(self, plan: PlanT) -> list[dict[str, Any]]:
        """The dry-run table: one row per cell."""

    @abstractmethod
    def dry_run(self, plan: PlanT) -> str:
        """Write what a dry run writes (Slurm: the scripts) and say so in one line."""

    @abstractmethod
    def run(self, plan: PlanT, follow: Follow | None = None) -> int:
        """Run or submit the plan, printing progress; the exit code (EXIT_OK, EXIT_FAILED)."""
