"""The seam between a cell's measured loop and what observes it: an `Instrument` and its moments.

The attempt (workloads/run.py `attempt`) builds the cell, runs its steps once and records its rows,
and calls the cell's instruments, one `Instruments` (its kind's list: workloads/kinds.py), at each
named moment; the list calls each member in order:

    before_build()        before the cell is built (the cold compile's process of its own)
    before_loop(cell)     the cell is built, compiled lazily; its first step comes next
    before_measuring()    before the last warm-up step: compiled and warm (workloads/cell/train.py)
    after_block(side, k)  a paired cell's block of k steps of `side` has ended on the device
                          (workloads/cell/paired.py): its last warm-up step, then each measured block
    after_loop()          the loop ended, finished or failed, before the ranks gather: the columns
                          this moment's state gives (the host's load, the GPU's clocks), also on failure
    after_summary(rec)    the run row has its steps and summary (`rec`, merged over the ranks):
                          the columns it adds from them (compile counters, the cold compile's time);
                          a steps column of its own it fills in `rec.steps` (the energy's `energy_j`)
    after_finished()      only where the loop finished, after the summary: work on the warm cell
                          outside the measured window, whose own steps, memory and compiles no
                          column of the loop counts; its columns

Every moment is a no-op here, so an instrument names only its own, and an instrument that does not
apply to a cell (the cold compile without `compile.measure=cold_warm`, DDP splits in a process of
its own) is this class itself: the loop has no branch for it. A new measurement is one subclass,
registered in that one list. Imports no torch (provenance and the host's load import without it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workloads.cell.recorder import CellRecorder
    from workloads.cell.train import PreparedCell


class Instrument:
    """Observes one attempt of a cell at the loop's named moments; this base observes nothing."""

    def before_build(self) -> None:
        """Before the cell's data, model and backend are built."""

    def before_loop(self, cell: PreparedCell) -> None:
        """The cell is built; its first (warm-up) step comes next."""

    def before_measuring(self) -> None:
        """Before the last warm-up step (without warm-up, the first step); may wait."""

    def after_block(self, side: str, steps: int) -> None:
        """A paired cell's block of `steps` steps of `side` (compiled or eager) has ended on the device."""

    def after_loop(self) -> dict[str, Any]:
        """Right after the last step, or after the failure that ended the loop: run-row columns."""
        return {}

    def after_summary(self, rec: CellRecorder) -> dict[str, Any]:
        """Once `rec` holds the merged steps and their summary: run-row columns."""
        return {}

    def after_finished(self) -> dict[str, Any]:
        """The loop finished and is summarised: more steps on the warm cell may run: run-row columns."""
        return {}


class Instruments(Instrument):
    """A list of instruments that is itself one: each moment calls every member in the list's order,
    and the columns they return are merged in that order (a later member's value wins)."""

    def __init__(self, members: Iterable[Instrument]) -> None:
        self.members = list(members)

    def before_build(self) -> None:
        for member in self.members:
            member.before_build()

    def before_loop(self, cell: PreparedCell) -> None:
        for member in self.members:
            member.before_loop(cell)

    def before_measuring(self) -> None:
        for member in self.members:
            member.before_measuring()

    def after_block(self, side: str, steps: int) -> None:
        for member in self.members:
            member.after_block(side, steps)

    def after_loop(self) -> dict[str, Any]:
        return _merged(member.after_loop() for member in self.members)

    def after_summary(self, rec: CellRecorder) -> dict[str, Any]:
        return _merged(member.after_summary(rec) for member in self.members)

    def after_finished(self) -> dict[str, Any]:
        return _merged(member.after_finished() for member in self.members)


def _merged(columns: Iterable[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for some in columns:
        merged.update(some)
    return merged
