"""`repeats=auto`'s stop rule: whether a cell's speedup is decided, built from the verdict `analyze`
prints, so that the reason a sweep stopped and the verdict never disagree.

After each round the orchestrator (orchestrator/sweep/rounds.py) asks where each cell still going
stands (`standings`: its speedup and 95% interval as the per-cell table has them, the paired one where
the cell measured paired, else against its eager cell; the end-to-end one where data-bound) and
`stop_reasons` decides, in this order:

- a cell with a speedup stops once `analysis.stats.equivalence_verdict` of that interval, with the
  cell's margin (config key `equivalence`), is decided: `decided: faster`, `decided: slower` or
  `decided: no difference`, exactly where the per-cell table says faster, slower or no difference
  with that margin; else once its half-width is at most `measure.rel_ci` x the speedup (`precise
  enough`), or at `max_repeats` replicates (`max_repeats reached`); never before MIN_REPLICATES,
  since one run's interval cannot see how runs differ;
- a cell without one (the eager cell) goes on while a cell compared with it, unpaired, goes on (a
  paired cell measures its own eager side), else stops: `its compared cells stopped`, or `no
  speedup to decide` where no cell is compared with it.

Decisions rest on the files alone (each cell's config.yaml and results), and each cell's bootstrap is
seeded by its id: a sweep run again decides as it did.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.collect import load_cells
from analysis.metrics import cell_metrics
from analysis.paired import UNPAIRED
from analysis.stats import equivalence_verdict
from analysis.verdicts import E2E_BASIS
from workloads.contract.sweep_dir import cell_dir, read_cell_config

#: The fewest replicates before a cell may stop: an interval over runs needs two.
MIN_REPLICATES = 2
#: The verdicts that stop a cell, and the stop reason each gives.
DECIDED = {verdict: f"decided: {verdict}" for verdict in ("faster", "slower", "no difference")}
FASTER, SLOWER, NO_DIFFERENCE = DECIDED.values()
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
    verdict = equivalence_verdict(np.array([low]), np.array([high]), standing.equivalence)[0]
    if verdict in DECIDED:
        return DECIDED[verdict]
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


def standings(sweep_dir: Path, going: Sequence[str], every: Sequence[str]) -> list[Standing]:
    """Where each cell of `going` (ids) stands, its speedup computed as the per-cell table's among
    `every` cell of the sweep (its eager cell may be one that is not going), its settings read from its
    config.yaml."""
    data = load_cells([cell_dir(sweep_dir, cell_id) for cell_id in every], warn=None)
    metrics = cell_metrics(data).set_index("cell_id")
    found = []
    for cell_id in going:
        row = metrics.loc[cell_id]
        name = "e2e_speedup" if row["verdict_basis"] == E2E_BASIS else "speedup"
        values = tuple(float(row[f"{name}{end}"]) for end in ("", "_low", "_high"))
        known = pd.notna(row["speedup_method"]) and not any(map(math.isnan, values))
        config = read_cell_config(cell_dir(sweep_dir, cell_id), warn=None)
        found.append(
            Standing(
                cell_id,
                int(row["replicates"]),
                config["max_repeats"],
                config["equivalence"],
                config["measure"]["rel_ci"],
                values if known else None,  # type: ignore[arg-type]
                row["baseline_cell_id"] if known and row["speedup_method"] == UNPAIRED else None,
            )
        )
    return found
