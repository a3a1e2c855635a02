"""A sweep as two pandas DataFrames, for a notebook or a script:

    from analysis import sweep_frames
    cells, steps = sweep_frames("sweeps/quickstart")

`cells` is the per-cell table with its raw numbers, one row per cell (what `compilebench analyze
--format csv|json` prints; the columns are in docs/analysis.md); `steps` has one row per step of
the attempts that count (warm-up included, `phase`), with the cell's `repeat`: join it to `cells`
on `cell_id` for the axes. Problems found on the way (an unreadable file, a cell without a result)
are printed as warnings on `warn` and leave the rest readable.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple, TextIO

import pandas as pd

from analysis.cells.device_time import LAUNCH_BOUND
from analysis.cells.metrics import cell_metrics
from analysis.cells.standings import auto_max_repeats
from analysis.reading.collect import load_sweep
from analysis.statistics.verdicts import DATA_BOUND, EQUIVALENCE
from workloads.contract.sweep_dir import STDERR, cell_dirs


class SweepFrames(NamedTuple):
    """The per-cell and the per-step table of a sweep."""

    cells: pd.DataFrame
    steps: pd.DataFrame


def sweep_frames(
    sweep_dir: Path | str,
    equivalence: float = EQUIVALENCE,
    data_bound: float = DATA_BOUND,
    launch_bound: float = LAUNCH_BOUND,
    warn: TextIO | None = STDERR,
) -> SweepFrames:
    """Read SWEEP_DIR into (cells, steps); `equivalence`, `data_bound` and `launch_bound` as `analyze`'s
    flags."""
    data = load_sweep(Path(sweep_dir), warn)
    metrics = cell_metrics(
        data,
        equivalence=equivalence,
        data_bound=data_bound,
        launch_bound=launch_bound,
        auto_max_repeats=auto_max_repeats(cell_dirs(Path(sweep_dir))),
    )
    return SweepFrames(metrics, data.steps)
