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
from analysis.cells.loaded import Settings, open_sweep
from analysis.statistics.verdicts import DATA_BOUND
from workloads.contract.sweep_dir import STDERR


class SweepFrames(NamedTuple):
    """The per-cell and the per-step table of a sweep."""

    cells: pd.DataFrame
    steps: pd.DataFrame


def sweep_frames(
    sweep_dir: Path | str,
    equivalence: float | None = None,
    data_bound: float = DATA_BOUND,
    launch_bound: float = LAUNCH_BOUND,
    warn: TextIO | None = STDERR,
) -> SweepFrames:
    """Read SWEEP_DIR into (cells, steps), opened as `analyze` opens it (analysis/cells/loaded.py
    `open_sweep`); `equivalence` (None: the margin the sweep's repeats=auto cells decided with, else
    the default), `data_bound` and `launch_bound` as `analyze`'s flags."""
    loaded = open_sweep(sweep_dir, settings=Settings(equivalence, data_bound, launch_bound), warn=warn)
    return SweepFrames(loaded.metrics, loaded.data.steps)
