"""The paired speedup: a compiled cell against its own eager baseline, measured in the same process.

A paired cell (workloads/cell/paired.py, docs/measurement.md "Paired measurement") alternates blocks
of compiled steps and of `force_eager` steps; `SweepData.pairs` has each pair's two block medians.
A pair's ratio is eager / compiled: its blocks ran seconds apart in one process, so a host that is
slower in one process than in the next slows both sides alike and the ratio holds where the ratio
of two cells' medians, each measured in its own process, moves. A cell's paired speedup is the
geometric mean over its replicates (processes, on whatever nodes they ran) of each replicate's median
pair ratio, with the t interval over those (analysis/statistics/intervals.py); with one replicate, its
median pair ratio with the bootstrap of its pairs (analysis/statistics/bootstrap.py).

The speedup against the separate eager cell stays beside it (`unpaired_speedup`): where the two
intervals are disjoint, `paired_disagrees` says so, for the reader to look at both.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.cells.uncertainty import PAIRED_STREAM, RESAMPLES, cell_codes, ratio_intervals
from analysis.reading.collect import REPEAT
from analysis.statistics.bootstrap import ReplicateSamples, percentile_interval, subset_cells
from analysis.statistics.intervals import RunLogs, t_interval
from workloads.contract.vocabulary import COMPLETED

#: What a cell's `speedup` is (`speedup_method`): its paired one, or the one against the eager cell.
PAIRED, UNPAIRED = "paired", "unpaired"
#: The columns `use_paired` adds to the per-cell metrics.
PAIRED_COLUMNS = [
    "speedup_method",
    "pairs",
    "unpaired_speedup",
    "unpaired_speedup_low",
    "unpaired_speedup_high",
    "paired_disagrees",
]


def pair_ratios(cells: pd.DataFrame, pairs: pd.DataFrame) -> ReplicateSamples:
    """Each pair's eager block median / compiled block median, by replicate of its cell among
    `cells`; pairs of a cell that did not complete, or not among `cells`, left out."""
    code = cell_codes(pairs["cell_id"], cells)
    done = (cells["status"] == COMPLETED).to_numpy()
    keep = code >= 0
    keep[keep] = done[code[keep]]
    ratio = pairs["eager_ms"].to_numpy(float) / pairs["compiled_ms"].to_numpy(float)
    return ReplicateSamples.from_steps(
        code[keep], pairs[REPEAT].to_numpy(np.int64)[keep], ratio[keep], len(cells)
    )


def paired_ratio_intervals(
    cells: pd.DataFrame, pairs: pd.DataFrame, top: np.ndarray, bottom: np.ndarray, resamples: int = RESAMPLES
) -> tuple[np.ndarray, np.ndarray]:
    """95% interval of the paired speedup of the cell at top[i] over that of the paired cell at
    bottom[i] (positions in `cells`; e.g. one workload in two software environments): Welch's over
    the two cells' per-run median pair ratios where both ran 2 replicates or more, else the ratio of
    their pair-bootstrap draws, the draws of their own intervals (`ratio_intervals`). Run r of one
    cell and run r of the other are separate processes: nothing pairs them, so the two cells' runs are
    two samples, not one sample of differences."""
    ratios = pair_ratios(cells, pairs)
    return ratio_intervals(cells, ratios, top, bottom, resamples, PAIRED_STREAM)


def paired_cells(ratios: ReplicateSamples, replicas: ReplicateSamples) -> np.ndarray:
    """Whether each cell's speedup is its paired one: every replicate that measured steps (`replicas`)
    measured pairs. A replicate that went on unpaired (its eager side out of memory) leaves the whole
    cell unpaired: the interval rests on all of a cell's runs or on none."""
    return (ratios.replicates > 0) & (ratios.replicates == replicas.replicates)


def use_paired(
    cells: pd.DataFrame,
    ratios: ReplicateSamples,
    paired: np.ndarray,
    compared: np.ndarray,
    resamples: int,
    rngs: Sequence[np.random.Generator],
    level: np.ndarray,
    tolerance: float = 0.0,
) -> None:
    """Where `paired`, make `speedup`, `speedup_low` and `speedup_high` the paired speedup and its
    interval: with 2 replicates or more the t interval over runs of their median ratios at each cell's
    `level`, with one the 95% bootstrap of its pairs (`rngs`: one generator per paired cell, in order).
    `unpaired_speedup...` keep the speedup
    against the eager cell for every cell that has one; `speedup_method` says which `speedup` is
    (none for the eager cell itself: `compared` is false there), `pairs` how many pairs it rests on,
    `paired_disagrees` whether the two intervals are disjoint by more than `tolerance`, relative (as
    `unstable`: on the H100, resnet50 at batch 256 gave 1.416x [1.416, 1.416] paired and [1.410, 1.415]
    unpaired, a gap of 0.07% that changes no verdict)."""
    for end in ("", "_low", "_high"):
        cells[f"unpaired_speedup{end}"] = cells[f"speedup{end}"].to_numpy(float)
    which = np.flatnonzero(paired)
    low, high = np.full(len(cells), np.nan), np.full(len(cells), np.nan)
    if len(which):
        low[which], high[which] = percentile_interval(
            subset_cells(ratios, which).hierarchical_medians(resamples, rngs)
        )
    runs = paired & (ratios.replicates >= 2)
    across_low, across_high = t_interval(RunLogs.of(ratios, ratios.replicate_medians()), level)
    low, high = np.where(runs, across_low, low), np.where(runs, across_high, high)
    for end, values in (("", ratios.medians()), ("_low", low), ("_high", high)):
        cells[f"speedup{end}"] = np.where(paired, values, cells[f"unpaired_speedup{end}"])
    counts = np.bincount(ratios.cell, weights=ratios.steps.count, minlength=len(cells))
    cells["pairs"] = np.where(paired, counts, np.nan)
    known = cells["speedup"].notna().to_numpy()
    cells["speedup_method"] = np.where(paired, PAIRED, np.where(compared & known, UNPAIRED, None))
    cells["paired_disagrees"] = paired & (
        (low > cells["unpaired_speedup_high"].to_numpy(float) * (1 + tolerance))
        | (high * (1 + tolerance) < cells["unpaired_speedup_low"].to_numpy(float))
    )
