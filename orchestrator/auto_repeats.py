"""`repeats=auto`: replicates round after round, each cell until its speedup is decided.

A round runs the next replicate of every cell still going, in grid order (the backends of a
workload alternate, as with `repeats=N`). After it, the analysis package computes each cell's
speedup and 95% interval as `analyze` does (the paired one where the cell measured paired, else
against its eager cell; the end-to-end one where data-bound), and `stop_reasons` decides:

- a cell with a speedup stops once its interval lies above 1 + margin or below 1 - margin
  (`decided: faster`, `decided: slower`) or within both (`decided: no difference`; the margin is
  `measure.equivalence`), once its half-width is at most `measure.rel_ci` x the speedup (`precise
  enough`), or at `measure.max_repeats` replicates (`max_repeats reached`); never before
  MIN_REPLICATES, since one run's interval cannot see how runs differ;
- a cell without one (the eager cell) goes on while a cell compared with it, unpaired, goes on (a
  paired cell measures its own eager side), else stops: `its compared cells stopped`, or `no
  speedup to decide` where no cell is compared with it.

A stopped cell's record (workloads/contract/sweep_dir.py `write_auto_stop`) says how many replicates
it ran and why it stopped; a cell with a record whose replicates completed is not run again. A cell
whose replicate failed leaves the rounds without one (`status` shows it unfinished; `--retry-failed`
or the same sweep again goes on). Decisions rest on the files alone, and each cell's bootstrap is
seeded by its id: a sweep run again decides as it did, and goes on where it stopped.
"""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from orchestrator.cells import Cell, Grid
from workloads.contract.attempts import missing_repeats
from workloads.contract.sweep_dir import cell_dir, read_auto_stop, write_auto_stop

#: The fewest replicates before a cell may stop: an interval over runs needs two.
MIN_REPLICATES = 2
FASTER, SLOWER, NO_DIFFERENCE = "decided: faster", "decided: slower", "decided: no difference"
PRECISE, MAX_REACHED = "precise enough", "max_repeats reached"
COMPARED_STOPPED, NO_SPEEDUP = "its compared cells stopped", "no speedup to decide"


@dataclass(frozen=True)
class Standing:
    """Where a cell still going stands after a round."""

    cell_id: str
    replicates: int
    """Its completed replicates."""
    max_repeats: int
    equivalence: float = 0.0
    rel_ci: float | None = None
    speedup: tuple[float, float, float] | None = None
    """(speedup, low, high) of its 95% interval; None for a cell without one (the eager cell)."""
    baseline: str | None = None
    """The eager cell its speedup is against where unpaired (it needs that cell's runs)."""


def _decided(standing: Standing) -> str | None:
    """Why a cell with a speedup stops (module doc), None to go on."""
    assert standing.speedup is not None
    speedup, low, high = standing.speedup
    margin = standing.equivalence
    if low > 1 + margin:
        return FASTER
    if high < 1 - margin:
        return SLOWER
    if 1 - margin <= low and high <= 1 + margin:
        return NO_DIFFERENCE
    if standing.rel_ci is not None and (high - low) / 2 <= standing.rel_ci * speedup:
        return PRECISE
    return MAX_REACHED if standing.replicates >= standing.max_repeats else None


def stop_reasons(standings: Sequence[Standing]) -> dict[str, str | None]:
    """{cell_id: why it stops now, or None to go on} for the cells still going (module doc)."""
    reasons: dict[str, str | None] = {}
    for standing in standings:
        if standing.speedup is not None:
            reasons[standing.cell_id] = _decided(standing) if standing.replicates >= MIN_REPLICATES else None
    needed = {s.baseline for s in standings if s.speedup is not None and reasons[s.cell_id] is None}
    compared = {s.baseline for s in standings}
    for standing in standings:
        if standing.speedup is not None:
            continue
        if standing.replicates >= standing.max_repeats:
            reasons[standing.cell_id] = MAX_REACHED
        elif standing.replicates < MIN_REPLICATES or standing.cell_id in needed:
            reasons[standing.cell_id] = None
        else:
            reasons[standing.cell_id] = COMPARED_STOPPED if standing.cell_id in compared else NO_SPEEDUP
    return {standing.cell_id: reasons[standing.cell_id] for standing in standings}


def standings(sweep_dir: Path, going: Sequence[Cell], every: Sequence[Cell]) -> list[Standing]:
    """Where each cell of `going` stands, its speedup computed by the analysis package among `every`
    cell of the sweep (its eager cell may be one that is not going)."""
    import pandas as pd

    from analysis.cells.metrics import cell_metrics
    from analysis.cells.paired import UNPAIRED
    from analysis.reading.collect import load_cells
    from analysis.statistics.verdicts import E2E_BASIS

    data = load_cells([cell_dir(sweep_dir, cell.cell_id) for cell in every], warn=None)
    metrics = cell_metrics(data).set_index("cell_id")
    found = []
    for cell in going:
        row = metrics.loc[cell.cell_id]
        name = "e2e_speedup" if row["verdict_basis"] == E2E_BASIS else "speedup"
        values = tuple(float(row[f"{name}{end}"]) for end in ("", "_low", "_high"))
        known = pd.notna(row["speedup_method"]) and not any(map(math.isnan, values))
        measure = cell.config["measure"]
        found.append(
            Standing(
                cell.cell_id,
                int(row["replicates"]),
                measure["max_repeats"],
                measure["equivalence"],
                measure["rel_ci"],
                values if known else None,  # type: ignore[arg-type]
                row["baseline_cell_id"] if known and row["speedup_method"] == UNPAIRED else None,
            )
        )
    return found


def stopped(sweep_dir: Path, cell: Cell) -> dict[str, Any] | None:
    """The cell's stop record where it has one and every replicate it names completed."""
    directory = cell_dir(sweep_dir, cell.cell_id)
    record = read_auto_stop(directory)
    return record if record and not missing_repeats(directory, record["replicates"]) else None


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
            for cell in grid.cells
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
        found = standings(grid.sweep_dir, ran, every.cells) if ran else []
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
    }
    write_auto_stop(cell_dir(sweep_dir, cell.cell_id), record)
    print(f"  {cell.label} ({cell.cell_id}) stops after {standing.replicates} run(s): {reason}", file=out)


def auto_note(grid: Grid) -> str:
    """`, repeats: auto (≤ 10)` for a grid with repeats=auto cells, for the dry run's line; else ''."""
    most = [cell.repeats for cell in grid.cells if cell.auto]
    return f", repeats: auto (≤ {max(most)})" if most else ""
