"""B/A of each matched cell's measured numbers, with 95% intervals.

The wall-clock step and end-to-end throughput, as `analyze`'s speedups have them
(analysis/cells/uncertainty.py `draws_ratio_interval`): Welch's over the runs where both cells ran 2
replicates or more, else the ratio of the two cells' bootstrap draws of their steps, which sees one
run only (`within one process`); only the cells that need draws are drawn. Both sweeps' cells stand
in one frame for it, B's after A's, each B cell against its A cell. A's cells are seeded by their
ids, so A draws what `analyze` of A draws; B's ids are prefixed (`B_ID_PREFIX`), so that a cell with
the same id in both (a sweep copied, a rerun) is not resampled in lockstep with itself: the two
sweeps are independent samples.

What the GPU did and what the host paid per launch, per cell and sweep, from the run rows of its
completed replicates (the cell's own steps: a paired cell's compiled side). The GPU time per step is
the device's (kernel durations are the GPU's), so it holds across hosts where the wall step does not
(two H100 hosts: to 0.3% or better, issue 39); null on the CPU, for distributed cells and in sweeps
before it was measured: `no device time`.

    GPU time per step   a replicate's `gpu_ms_per_step` (the median over its profiled windows);
                        the cell's: the geometric mean over its replicates
    µs per launch       host_ms_per_step * 1e3 / launches_per_step per replicate; median over them
    host_op_us          the host's µs per tiny op before measuring, median over replicates: the
                        host's speed where launches were not counted (sweeps before issue 39)

B/A of the GPU time: Welch's interval over the runs' values where both cells ran 2 replicates or
more (analysis/statistics/intervals.py), else Welch's over their profiled windows (`gpu_ms_windows`,
3 per run by default; a side's windows over all its replicates), which sees one process only
(`within one process`, as for the steps): no interval where a side has fewer than 2 windows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

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
from analysis.statistics.intervals import RunLogs, welch_interval
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
class DeviceSide:
    """One sweep's matched cells (in order): per cell the logs of its runs' GPU time per step and of
    its windows', and the medians over its replicates of launches per step, µs per launch and
    host_op_us (NaN where not measured)."""

    runs: RunLogs
    windows: RunLogs
    launches_per_step: np.ndarray
    us_per_launch: np.ndarray
    host_op_us: np.ndarray

    @property
    def gpu_ms_per_step(self) -> np.ndarray:
        """The geometric mean over the cell's replicates (NaN where none measured it)."""
        return np.where(self.runs.count > 0, np.exp(self.runs.mean), np.nan)


def _median(code: np.ndarray, values: np.ndarray, cells: int) -> np.ndarray:
    """The median of each cell's known values (NaN for none)."""
    known = pd.Series(values, dtype=float).groupby(code).median()
    return known.reindex(range(cells)).to_numpy(float)


def device_side(replicates: pd.DataFrame, cell_ids: list[str]) -> DeviceSide:
    """The DeviceSide of these cells from a sweep's replicate rows (SweepData.replicates)."""
    rows = replicates[replicates["status"] == COMPLETED]
    code = pd.Index(cell_ids).get_indexer(rows["cell_id"].astype(object))
    rows, code, n = rows[code >= 0], code[code >= 0], len(cell_ids)
    column = lambda name: rows[name].to_numpy(float)  # noqa: E731
    windows = [np.asarray(w if w is not None else [], dtype=float) for w in rows["gpu_ms_windows"]]
    window_code = np.repeat(code, [len(w) for w in windows])
    with np.errstate(divide="ignore", invalid="ignore"):
        us_per_launch = column("host_ms_per_step") * 1e3 / column("launches_per_step")
    return DeviceSide(
        RunLogs.from_values(code, column("gpu_ms_per_step"), n),
        RunLogs.from_values(window_code, np.concatenate([np.empty(0), *windows]), n),
        _median(code, column("launches_per_step"), n),
        _median(code, np.where(np.isfinite(us_per_launch), us_per_launch, np.nan), n),
        _median(code, column("host_op_us"), n),
    )


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
