"""B/A of each matched cell's measured numbers, with 95% intervals.

The wall-clock step and end-to-end throughput, as `analyze`'s speedups have them
(analysis/cells/uncertainty.py `draws_ratio_interval`): Welch's over the runs where both cells ran 2
replicates or more, else the ratio of the two cells' bootstrap draws of their steps, which sees one
run only (`within one process`); only the cells that need draws are drawn. Both sweeps' cells stand
in one frame for it, B's after A's, each B cell against its A cell. A's cells are seeded by their
ids, so A draws what `analyze` of A draws; B's ids are prefixed (`B_ID_PREFIX`), so that a cell with
the same id in both (a sweep copied, a rerun) is not resampled in lockstep with itself: the two
sweeps are independent samples.

What the GPU did and what the host paid per launch, per cell and sweep, are the cells' own side's
(a paired cell's compiled side) `DeviceSide` (analysis/cells/device_time.py), as `analyze` has them:
the GPU time per step, the geometric mean over its completed replicates, holds across hosts where
the wall step does not (kernel durations are the GPU's); µs per launch and `host_op_us` (the host's
speed where launches were not counted) the medians. Null on the CPU, for distributed cells and in
sweeps before it was measured: `no device time`.

B/A of the GPU time: Welch's interval over the runs' values where both cells ran 2 replicates or
more (analysis/statistics/intervals.py), else Welch's over their profiled windows (`gpu_ms_windows`,
3 per run by default; a side's windows over all its replicates), which sees one process only
(`within one process`, as for the steps): no interval where a side has fewer than 2 windows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.cells.device_time import DeviceSide
from analysis.cells.uncertainty import (
    RESAMPLES,
    SEED,
    WITHIN_ONE_PROCESS,
    Draws,
    across_runs,
    draws_ratio_interval,
    median_samples,
)
from analysis.reading.collect import SweepData
from analysis.statistics.intervals import welch_interval
from workloads.contract.vocabulary import COMPLETED

#: What B's cell ids are prefixed with in the frame both sweeps' cells share (no id holds a '/':
#: it names a directory).
B_ID_PREFIX = "B/"


@dataclass(frozen=True)
class WallRatios:
    """Per matched cell, the 95% interval of B's median step / A's (`step_low`, `step_high`) and of B's
    steps per ms end to end / A's (`rate_low`, `rate_high`), and what it rests on (`interval`)."""

    step_low: np.ndarray
    step_high: np.ndarray
    rate_low: np.ndarray
    rate_high: np.ndarray
    interval: np.ndarray


def run_counts_text(a_runs: np.ndarray, b_runs: np.ndarray) -> np.ndarray:
    """`across 3+4 runs` where both sides have 2 runs or more, else `within one process`."""
    texts = np.array([f"across {m}+{n} runs" for m, n in zip(a_runs, b_runs)], dtype=object)
    return np.where(across_runs(a_runs, b_runs), texts, WITHIN_ONE_PROCESS)


def wall_ratios(data_a: SweepData, data_b: SweepData, ids_a: list[str], ids_b: list[str]) -> WallRatios:
    """The ratios' intervals of the completed cells `ids_b` of B against `ids_a` of A (pairwise)."""
    n = len(ids_a)
    cells = pd.DataFrame({"cell_id": [*ids_a, *(B_ID_PREFIX + i for i in ids_b)], "status": COMPLETED})
    b_steps = data_b.steps.assign(cell_id=B_ID_PREFIX + data_b.steps["cell_id"].astype(str))
    samples = median_samples(cells, pd.concat([data_a.steps, b_steps], ignore_index=True))
    draws = Draws(cells, samples, RESAMPLES, SEED, np.full(2 * n, 0.95))
    base = np.concatenate([np.arange(n), np.arange(n)])  # B's row n + k against A's row k
    against_a = np.arange(2 * n) >= n
    step = draws_ratio_interval(draws, "median", base, against_a, invert=False)
    rate = draws_ratio_interval(draws, "rate", base, against_a, invert=False)
    runs = samples.replicates
    return WallRatios(step[0][n:], step[1][n:], rate[0][n:], rate[1][n:], run_counts_text(runs[:n], runs[n:]))


@dataclass(frozen=True)
class GpuRatios:
    """Per matched cell: B's GPU time per step / A's with its 95% interval and what it rests on
    (None where a side has no device time)."""

    ratio: np.ndarray
    low: np.ndarray
    high: np.ndarray
    interval: np.ndarray


def gpu_ratios(a: DeviceSide, b: DeviceSide) -> GpuRatios:
    """B/A of the GPU time per step (module docstring)."""
    across = across_runs(a.runs.count, b.runs.count)
    run_low, run_high = welch_interval(b.runs, a.runs)
    window_low, window_high = welch_interval(b.windows, a.windows)
    measured = (a.runs.count > 0) & (b.runs.count > 0)
    return GpuRatios(
        b.gpu_ms_per_step / a.gpu_ms_per_step,
        np.where(across, run_low, window_low),
        np.where(across, run_high, window_high),
        np.where(measured, run_counts_text(a.runs.count, b.runs.count), None),
    )
