"""Where each cell of a repeats=auto sweep stands after a round: its replicates, its settings and its
speedup with the interval the per-cell table gives it (at the level the stop rule spends at that
round), for the stop rule (analysis/statistics/decision.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from analysis.cells.loaded import Loaded
from analysis.cells.paired import UNPAIRED
from analysis.statistics.decision import Standing
from analysis.statistics.verdicts import E2E_BASIS
from workloads.contract.sweep_dir import cell_dir, read_cell_config


def standings(loaded: Loaded, going: Sequence[str]) -> list[Standing]:
    """Where each cell of `going` (ids) stands, its speedup the per-cell table's of the cells `loaded`
    (analysis/cells/loaded.py `open_sweep`: the sweep's, so its eager cell may be one that is not
    going), its settings read from its config.yaml, its eager cell's runs where unpaired and its run
    apart where one is."""
    metrics = loaded.metrics.set_index("cell_id")
    found = []
    for cell_id in going:
        row = metrics.loc[cell_id]
        name = "e2e_speedup" if row["verdict_basis"] == E2E_BASIS else "speedup"
        values = tuple(float(row[f"{name}{end}"]) for end in ("", "_low", "_high"))
        known = pd.notna(row["speedup_method"]) and not any(map(math.isnan, values))
        config = read_cell_config(cell_dir(loaded.sweep_dir, cell_id), warn=None)
        unpaired = known and row["speedup_method"] == UNPAIRED
        found.append(
            Standing(
                cell_id,
                int(row["replicates"]),
                config["max_repeats"],
                config["equivalence"],
                config["measure"]["rel_ci"],
                values if known else None,  # type: ignore[arg-type]
                row["baseline_cell_id"] if unpaired else None,
                int(metrics.loc[row["baseline_cell_id"], "replicates"]) if unpaired else None,
                row["runs_apart"] if known and pd.notna(row["runs_apart"]) else None,
            )
        )
    return found
