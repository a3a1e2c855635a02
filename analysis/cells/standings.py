"""Where each cell of a repeats=auto sweep stands after a round: its replicates, its settings and its
speedup with the 95% interval the per-cell table gives it, for the stop rule
(analysis/statistics/decision.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from analysis.cells.metrics import cell_metrics
from analysis.cells.paired import UNPAIRED
from analysis.reading.collect import load_cells
from analysis.statistics.decision import Standing
from analysis.statistics.verdicts import E2E_BASIS
from workloads.contract.sweep_dir import cell_dir, read_cell_config


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
