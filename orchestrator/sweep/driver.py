"""The sweep driver: the one place above the executors that runs a sweep, for `compilebench sweep`
and `status --retry-failed` alike.

It prepares the sweep directory once (each cell's config.yaml and the manifest; a retry finds them
there), then runs either every replicate of the cells through the executor in one go, or the rounds
of repeats=auto (orchestrator/sweep/rounds.py), each a plan and a run of the executor. repeats=auto
decides between rounds, so it is refused, the same way for every executor, where the sweep would
not wait for them (submitted, without --wait). With --wait it follows what the executor
submitted, asking the executor's queue (`Executor.poll`, through orchestrator/executors/status.py)
until no cell is queued. Then it prints the closing tables (orchestrator/sweep/tables.py) and returns
the exit code. The executor only runs or submits what it is given (orchestrator/executors/base.py).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Collection, Sequence
from typing import Any

from orchestrator.executors.base import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Executor, ExecutorError, Follow
from orchestrator.executors.cell_process import SKIPPED, Outcome
from orchestrator.executors.status import CellStatus, all_completed, follow, sweep_status
from orchestrator.grid.cells import Cell, Grid
from orchestrator.grid.files import prepare
from orchestrator.sweep.rounds import run_rounds
from orchestrator.sweep.tables import closing_tables, status_table
from workloads.contract.vocabulary import COMPLETED, NOT_SUPPORTED, UNKNOWN


class _Stopped(Exception):
    """A run or a round of repeats=auto that could not be planned, submitted or waited for: the exit
    code."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def drive(
    executor: Executor[Any],
    plan: Any,
    grid: Grid,
    wait: Follow | None = None,
    only: Collection[str] | None = None,
) -> int:
    """Run the sweep `grid` through `executor`, whose `plan` of it is given (checked before anything is
    written); with `only`, just those cells (`status --retry-failed`: the directory is prepared
    already). `wait`: `sweep --wait`. Returns the exit code."""
    cells = (
        grid
        if only is None
        else dataclasses.replace(grid, cells=[c for c in grid.cells if c.cell_id in only])
    )
    auto = any(cell.auto for cell in cells.cells)
    if auto and wait is None and not executor.foreground:
        print(
            "error: repeats=auto decides between rounds, so the sweep must wait for each: run "
            "`compilebench sweep` with its overrides and --wait",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if only is None:
        prepare(grid)
        where = "" if executor.foreground else f", cluster {grid.cluster.get('name')}"  # else: here
        print(
            f"sweep: {len(grid.cells)} cell(s) -> {grid.sweep_dir} (executor {executor.name}{where})",
            flush=True,
        )
    outcomes: list[Outcome] = []
    states: list[CellStatus] | None = None

    def run(the_plan: Any) -> None:
        nonlocal states
        ran = executor.run(the_plan)
        outcomes.extend(ran.outcomes)
        if ran.code != EXIT_OK:
            raise _Stopped(ran.code)
        if wait is not None and not executor.foreground:
            states = _follow(executor, cells, wait)

    def run_round(todo: Sequence[tuple[Cell, int]]) -> None:
        try:
            the_plan = executor.plan(cells, replicates=todo)
        except ExecutorError as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise _Stopped(EXIT_USAGE) from None
        run(the_plan)

    try:
        if auto:
            done = run_rounds(cells, run_round, every=grid)
            outcomes[:0] = [Outcome(cell_id, SKIPPED) for cell_id in done]
        else:
            run(plan)
    except _Stopped as stop:
        return stop.code
    return _close(executor, cells, auto, outcomes, states)


def _follow(executor: Executor[Any], cells: Grid, wait: Follow) -> list[CellStatus]:
    """--wait: the cells per state at once, then every `poll_s` seconds until none is queued (or the
    queue has not answered for `give_up_s`); then the status table, and an error where it gave up.
    Ctrl-C stops the waiting, not the jobs (130). Returns the cells' states at the last look."""
    print(
        f"waiting for the jobs, a look every {wait.poll_s:g} s (Ctrl-C stops waiting, not the jobs)",
        flush=True,
    )
    try:
        states = follow(cells.sweep_dir, interval_s=wait.poll_s, give_up_s=wait.give_up_s)
    except KeyboardInterrupt:
        print(
            "\nstopped waiting; the jobs keep running. Check them with: "
            f"compilebench status {cells.sweep_dir}",
            file=sys.stderr,
        )
        raise _Stopped(130) from None
    print(status_table(states))
    if any(row.state == UNKNOWN for row in states):  # follow gave up on a queue that did not answer
        print(
            f"error: {executor.queue_name} has not answered for {wait.give_up_s:g} s: stopped waiting; "
            f"the jobs may still run. Check them with: compilebench status {cells.sweep_dir}",
            file=sys.stderr,
        )
    return states


def _close(
    executor: Executor[Any], cells: Grid, auto: bool, outcomes: list[Outcome], states: list[CellStatus] | None
) -> int:
    """The closing tables and the exit code: of the replicates run here (foreground), of every cell of
    the sweep after repeats=auto's rounds, else of the cells waited for (success once submitted)."""
    sys.stdout.flush()  # reading may warn on stderr; keep it after the progress lines
    ids = [cell.cell_id for cell in cells.cells]
    tables = closing_tables(cells.sweep_dir, ids, per_cell=executor.foreground, auto=auto)
    if tables:
        print(f"\n{tables}")
    if executor.foreground:
        # A cell this machine cannot run (fp8 on the CPU) is no failure of the sweep: a retry here
        # would not change it, and a grid of bf16 and fp8 cells would otherwise never exit 0 here.
        unsupported = sum(o.status == NOT_SUPPORTED for o in outcomes)
        failed = sum(not o.ok for o in outcomes) - unsupported
        done = sum(o.status == COMPLETED for o in outcomes)
        skipped = sum(o.status == SKIPPED for o in outcomes)
        not_here = f", {unsupported} not supported here" if unsupported else ""
        print(
            f"\n{done} completed, {skipped} already completed, {failed} failed{not_here}; "
            f"results in {cells.sweep_dir}"
        )
        return EXIT_FAILED if failed else EXIT_OK
    if auto:
        states = sweep_status(cells.sweep_dir)
    if states is None:
        return EXIT_OK
    return EXIT_OK if all_completed(states) else EXIT_FAILED
