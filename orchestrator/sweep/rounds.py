"""`repeats=auto`: replicates round after round, each cell until its speedup is decided.

A round runs the next replicate of every cell still going, in grid order in odd rounds and the
reverse in even ones (`Grid.round_order`: the backends of a workload alternate, as with
`repeats=N`). After it, analysis/statistics/decision.py decides which
cells stop and why (decided faster, slower or no difference exactly where `analyze`'s verdict says so with the
margin `equivalence`; precise enough; `max_repeats` reached; the eager cell kept for its unpaired
cells).

A stopped cell's record (workloads/contract/sweep_dir.py `write_auto_stop`) says how many replicates
it ran and why it stopped; a cell with a record whose replicates completed is not run again. A cell
whose replicate failed leaves the rounds without one (`status` shows it unfinished; `--retry-failed`
or the same sweep again goes on). Decisions rest on the files alone: a sweep run again decides as it
did, and goes on where it stopped.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from analysis.cells.loaded import open_sweep
from analysis.cells.standings import standings
from analysis.statistics.decision import Standing, stop_reasons
from orchestrator.grid.cells import Cell, Grid
from orchestrator.grid.files import stopped
from workloads.contract.attempts import missing_repeats
from workloads.contract.sweep_dir import cell_dir, write_auto_stop


def run_rounds(
    grid: Grid,
    run_round: Callable[[list[tuple[Cell, int]]], object],
    every: Grid | None = None,
    out: TextIO | None = None,
) -> list[str]:
    """Run `grid`'s replicates round after round through `run_round` (it runs the (cell, repeat)
    given, in order), deciding after each which cells go on (module doc) and recording why the
    others stopped; returns the repeats=auto cells that had stopped before. `every`: the sweep's
    whole grid, where `grid` is some of its cells (`status --retry-failed`); cells of `grid` without
    repeats=auto run their `repeats` in the same rounds."""
    out = sys.stdout if out is None else out
    every = every or grid
    done_before = [cell.cell_id for cell in grid.cells if cell.auto and stopped(grid.sweep_dir, cell)]
    going = {cell.cell_id for cell in grid.cells if cell.auto and cell.cell_id not in done_before}
    for repeat in itertools.count():
        todo = [
            (cell, repeat)
            for cell in grid.round_order(repeat)
            if (cell.cell_id in going if cell.auto else repeat < cell.repeats)
        ]
        if not todo:
            return done_before
        print(f"round {repeat + 1}: {len(todo)} replicate(s)", file=out, flush=True)
        run_round(todo)
        ran = [
            cell
            for cell in grid.cells
            if cell.cell_id in going
            and repeat not in missing_repeats(cell_dir(grid.sweep_dir, cell.cell_id), repeat + 1)
        ]
        ids = [cell.cell_id for cell in every.cells]
        found = standings(open_sweep(grid.sweep_dir, ids, warn=None), [c.cell_id for c in ran]) if ran else []
        reasons = stop_reasons(found)
        going = {cell_id for cell_id, reason in reasons.items() if reason is None}
        for standing, cell in zip(found, ran):
            if reasons[cell.cell_id] is not None:
                _record(grid.sweep_dir, cell, standing, reasons[cell.cell_id], out)


def _record(sweep_dir: Path, cell: Cell, standing: Standing, reason: str, out: TextIO) -> None:
    """Write the stop record of a cell that stops now, and say so."""
    speedup = dict(zip(("speedup", "low", "high"), standing.speedup or (None, None, None)))
    record = {
        "replicates": standing.replicates,
        "reason": reason,
        **speedup,
        "equivalence": standing.equivalence,
        **({"against": standing.against} if standing.against is not None else {}),
        **({"apart": standing.apart} if standing.apart is not None else {}),
    }
    write_auto_stop(cell_dir(sweep_dir, cell.cell_id), record)
    print(f"  {cell.label} ({cell.cell_id}) stops after {standing.replicates} run(s): {reason}", file=out)
