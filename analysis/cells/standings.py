"""Where each cell of a repeats=auto sweep stands after a round: its replicates, its settings and its
speedup with the interval the per-cell table gives it (at the level the stop rule spends at that
round), for the stop rule (analysis/statistics/decision.py); and which cells ran with repeats=auto,
read from their config.yaml, for every table (`auto_max_repeats`)."""

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
from workloads.contract.vocabulary import AUTO_REPEATS


def auto_max_repeats(directories: Sequence[Path]) -> dict[str, int]:
    """{cell id: max_repeats} of the cells in these directories whose config.yaml says repeats=auto:
    their intervals are at the level the stop rule spent (analysis/cells/uncertainty.py `interval_levels`)."""
    found = {}
    for directory in directories:
        config = read_cell_config(directory, warn=None)
        if config.get("repeats") == AUTO_REPEATS and "max_repeats" in config:
            found[Path(directory).name] = int(config["max_repeats"])
    return found


def standings(sweep_dir: Path, going: Sequence[str], every: Sequence[str]) -> list[Standing]:
    """Where each cell of `going` (ids) stands, its speedup computed as the per-cell table's among
    `every` cell of the sweep (its eager cell may be one that is not going), its settings read from its
    config.yaml."""
    directories = [cell_dir(sweep_dir, cell_id) for cell_id in every]
    data = load_cells(directories, warn=None)
    metrics = cell_metrics(data, auto_max_repeats=auto_max_repeats(directories)).set_index("cell_id")
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
