"""Device time per side: what a cell's step costs the GPU, what it costs the host, and which of the
two sets its pace (`launch-bound`), so that a speedup that belongs to the host is told from one that
belongs to the kernels.

Each CUDA cell of one process profiles short windows of each side after measuring (workloads/
instruments/profiled_window.py; prose: docs/measurement.md "Device time and the host"): its GPU ms per
step (kernel and copy intervals, streams merged; the GPU's durations, which the profiler does not
slow), launches and kernels per step; its measured steps give the host's time per step (each step's
call to its return, workloads/cell/step_timer.py). Per cell, over
its completed replicates: GPU ms the geometric mean, counts the median, µs per launch (host ms per
step / launches) the median of each run's. The device-time speedup is eager GPU ms / compiled GPU ms
with its interval as the wall speedup's: over runs where there are 2 or more (t for a paired cell's
per-run ratios, Welch for two cells), else Welch over the profiled windows, within one process.

The model of a side's step on a host of another speed (`predicted_step_ms`): the host issues a step's
launches one after another while the GPU runs what it has been given, so a step takes the longer of
the two, max(GPU ms, launches x µs per launch / 1000). It ignores the overlap's edges (near balance a
step takes somewhat longer than either), a step whose host waits on the device (`.item()`, a
synchronising copy), which adds the two, and a GPU-bound side's host time, which is the pace of the
full launch queue it waited on, an upper bound of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.cells.uncertainty import WITHIN_ONE_PROCESS, across_runs
from analysis.reading.collect import REPEAT, SweepData
from analysis.statistics.intervals import RunLogs, t_interval, welch_interval
from workloads.contract.vocabulary import COMPLETED

#: Above this share of a side's measured step that the GPU idles (1 - GPU ms / measured step) the side
#: is launch-bound (`--launch-bound`). A step the GPU idles a fifth of could run 1.25x faster with the
#: host out of the way: a gain the size of those compiling brings (1.1x-1.4x), so the label says where
#: the host, not the kernels, sets the pace. The GPU's own gaps between queued kernels (about a µs
#: each) stay below it while the kernels last 5 µs or more on average, as a GPU-bound side's do.
LAUNCH_BOUND = 0.2
#: The sides: a cell's own steps ("") and a paired cell's eager side ("eager_").
SIDES = ("", "eager_")
#: Per side, GPU ms per step (geometric mean over runs), launches and kernels per step (median), the
#: host's µs per launch (median of each run's), whether the side is launch-bound, and the step the model
#: predicts at this host's µs per launch (`predicted_step_ms`), to hold against the measured one.
SIDE_COLUMNS = [
    "gpu_ms", "launches_per_step", "kernels_per_step", "host_us_per_launch", "launch_bound",
    "predicted_step_ms",
]  # fmt: skip
#: The columns `device_columns` gives.
DEVICE_COLUMNS = [
    *(f"{side}{name}" for name in SIDE_COLUMNS for side in SIDES),
    "eager_step_ms",  # a paired cell's eager side's measured step
    "device_speedup", "device_speedup_low", "device_speedup_high", "device_interval",
    "host_dependent",  # one side launch-bound, the other not: the wall speedup is the host's
    "host_op_us",  # the host's µs per tiny op before measuring (older sweeps' only host speed)
]  # fmt: skip


@dataclass(frozen=True)
class DeviceSide:
    """One side of each of some cells, over their completed runs: the logs of each run's GPU ms per
    step and of every window's (pooled over the runs: an interval within one process), and the medians
    over the runs of launches and kernels per step, µs per launch (host ms per step x 1000 / launches)
    and the host's µs per tiny op (NaN where not measured)."""

    runs: RunLogs
    windows: RunLogs
    launches_per_step: np.ndarray
    kernels_per_step: np.ndarray
    us_per_launch: np.ndarray
    host_op_us: np.ndarray

    @property
    def gpu_ms_per_step(self) -> np.ndarray:
        """The geometric mean over the cell's runs (NaN where none measured it)."""
        return np.where(self.runs.count > 0, np.exp(self.runs.mean), np.nan)


def completed_runs(replicates: pd.DataFrame, cell_ids: Sequence[str]) -> pd.DataFrame:
    """The completed replicates' rows of these cells, with `code`: the cell's position in `cell_ids`."""
    runs = replicates[replicates["status"] == COMPLETED].copy()
    runs["code"] = pd.Index(cell_ids).get_indexer(runs["cell_id"].astype(object))
    return runs[runs["code"] >= 0].reset_index(drop=True)


def _median(code: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """The median of each cell's known values (NaN for none)."""
    return pd.Series(values, dtype=float).groupby(code).median().reindex(range(n)).to_numpy(float)


def device_side(runs: pd.DataFrame, n: int, side: str = "") -> DeviceSide:
    """The DeviceSide of `side` ("" or "eager_") of `n` cells from their `completed_runs`."""
    code = runs["code"].to_numpy(np.int64)
    column = lambda name: runs[f"{side}{name}"].to_numpy(float)  # noqa: E731
    windows = [np.asarray(w if w is not None else [], dtype=float) for w in runs[f"{side}gpu_ms_windows"]]
    with np.errstate(divide="ignore", invalid="ignore"):
        us_per_launch = column("host_ms_per_step") * 1e3 / column("launches_per_step")
    return DeviceSide(
        RunLogs.from_values(code, column("gpu_ms_per_step"), n),
        RunLogs.from_values(
            np.repeat(code, [len(w) for w in windows]), np.concatenate([np.empty(0), *windows]), n
        ),
        _median(code, column("launches_per_step"), n),
        _median(code, column("kernels_per_step"), n),
        _median(code, np.where(np.isfinite(us_per_launch), us_per_launch, np.nan), n),
        _median(code, runs["host_op_us"].to_numpy(float), n),
    )


def _per_run(data: SweepData, cells: pd.DataFrame) -> pd.DataFrame:
    """`completed_runs` of `cells` with, for paired ones, `eager_step_ms` (the median of the run's
    eager blocks)."""
    runs = completed_runs(data.replicates, cells["cell_id"])
    eager = data.pairs.groupby(["cell_id", REPEAT])["eager_ms"].median().rename("eager_step_ms")
    return runs.join(eager, on=["cell_id", REPEAT]) if len(eager) else runs.assign(eager_step_ms=np.nan)


def predicted_step_ms(gpu_ms: object, launches: object, us_per_launch: object) -> np.ndarray:
    """The step a side would take on a host that spends `us_per_launch` µs on each of its `launches`
    launches per step while its GPU works `gpu_ms` ms: max(gpu_ms, launches x µs / 1000), elementwise
    (NaN where one is unknown)."""
    gpu, host = (
        np.asarray(gpu_ms, dtype=float),
        np.asarray(launches, dtype=float) * np.asarray(us_per_launch, dtype=float) / 1e3,
    )
    return np.where(np.isnan(gpu) | np.isnan(host), np.nan, np.fmax(gpu, host))


def launch_bound_sides(gpu_ms: np.ndarray, step_ms: np.ndarray, threshold: float) -> np.ndarray:
    """Whether a side whose GPU works `gpu_ms` of its measured `step_ms` is launch-bound: the GPU idles
    more than `threshold` of the step (False where either is unknown)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        idle = 1 - np.asarray(gpu_ms, dtype=float) / np.asarray(step_ms, dtype=float)
    return np.nan_to_num(idle, nan=0.0) > threshold


def _speedup(
    runs: pd.DataFrame,
    sides: dict[str, DeviceSide],
    columns: pd.DataFrame,
    paired: np.ndarray,
    base: np.ndarray,
    level: np.ndarray,
) -> None:
    """device_speedup, its interval and what the interval rests on, into `columns`."""
    n = len(columns)
    code = runs["code"].to_numpy(np.int64)
    own, eager = (runs[f"{side}gpu_ms_per_step"].to_numpy(float) for side in SIDES)
    gpu, eager_gpu = columns["gpu_ms"].to_numpy(float), columns["eager_gpu_ms"].to_numpy(float)
    own_runs = sides[""].runs
    windows = {side: sides[side].windows for side in SIDES}
    has_base = base >= 0
    at = np.where(has_base, base, 0)
    centre = np.where(paired, eager_gpu / gpu, np.where(has_base, gpu[at] / gpu, np.nan))
    # Paired: the per-run ratios (t over runs), else the two sides' windows of its one run.
    ratio_runs = RunLogs.from_values(code, eager / own, n)
    paired_low, paired_high = t_interval(ratio_runs, level)
    window_low, window_high = welch_interval(windows["eager_"], windows[""], level)
    paired_runs = ratio_runs.count >= 2
    paired_low = np.where(paired_runs, paired_low, window_low)
    paired_high = np.where(paired_runs, paired_high, window_high)
    # Unpaired: the eager cell's runs against its own (Welch), else their windows.
    cell_runs = across_runs(own_runs.count, own_runs.count[at])
    runs_low, runs_high = welch_interval(own_runs.take(at), own_runs, level)
    cells_low, cells_high = welch_interval(windows[""].take(at), windows[""], level)
    unpaired_low = np.where(cell_runs, runs_low, cells_low)
    unpaired_high = np.where(cell_runs, runs_high, cells_high)
    itself = has_base & (at == np.arange(n)) & ~paired
    unpaired_low[itself] = unpaired_high[itself] = 1.0  # the eager cell against itself
    known = np.isfinite(centre) & (centre > 0)
    low = np.where(known, np.where(paired, paired_low, unpaired_low), np.nan)
    high = np.where(known, np.where(paired, paired_high, unpaired_high), np.nan)
    columns["device_speedup"] = np.where(known, centre, np.nan)
    columns["device_speedup_low"], columns["device_speedup_high"] = low, high
    over_runs = np.where(paired, paired_runs, cell_runs)
    counts = np.where(paired, ratio_runs.count, np.minimum(own_runs.count, own_runs.count[at]))
    texts = np.array([f"across {count} runs" for count in counts], dtype=object)
    label = np.where(over_runs, texts, WITHIN_ONE_PROCESS)
    columns["device_interval"] = np.where(known & np.isfinite(low) & ~itself, label, None)


def device_columns(
    cells: pd.DataFrame,
    data: SweepData,
    paired: np.ndarray,
    base: np.ndarray,
    level: np.ndarray,
    launch_bound: float = LAUNCH_BOUND,
) -> pd.DataFrame:
    """DEVICE_COLUMNS of each cell (in `cells`' order, with its `median_step_ms` and `data_bound`):
    `paired` whether its speedup is its paired one, `base` its eager cell's position (-1: none),
    `level` its interval level. NaN where a side has no device time (the CPU, distributed cells,
    sweeps before it); a side is launch-bound where the GPU idles more than `launch_bound` of its
    measured step and the cell is not data-bound (a wait for batches idles the GPU too)."""
    n = len(cells)
    runs = _per_run(data, cells)
    code = runs["code"].to_numpy(np.int64)
    columns = pd.DataFrame(index=cells.index)
    sides = {side: device_side(runs, n, side) for side in SIDES}
    for side, device in sides.items():
        columns[f"{side}gpu_ms"] = device.gpu_ms_per_step
        columns[f"{side}launches_per_step"] = device.launches_per_step
        columns[f"{side}kernels_per_step"] = device.kernels_per_step
        columns[f"{side}host_us_per_launch"] = device.us_per_launch
    columns["host_op_us"] = sides[""].host_op_us
    eager_runs = RunLogs.from_values(code, runs["eager_step_ms"].to_numpy(float), n)
    columns["eager_step_ms"] = np.where(paired & (eager_runs.count > 0), np.exp(eager_runs.mean), np.nan)
    done = (cells["status"] == COMPLETED).to_numpy() & ~cells["data_bound"].to_numpy(bool)
    steps = {"": cells["median_step_ms"].to_numpy(float), "eager_": columns["eager_step_ms"].to_numpy(float)}
    for side in SIDES:
        bound = launch_bound_sides(columns[f"{side}gpu_ms"].to_numpy(float), steps[side], launch_bound)
        columns[f"{side}launch_bound"] = done & bound
        columns[f"{side}predicted_step_ms"] = predicted_step_ms(
            columns[f"{side}gpu_ms"],
            columns[f"{side}launches_per_step"],
            columns[f"{side}host_us_per_launch"],
        )
    _speedup(runs, sides, columns, paired, base, level)
    own, eager = columns["launch_bound"].to_numpy(bool), columns["eager_launch_bound"].to_numpy(bool)
    has_base = (base >= 0) & (base != np.arange(n))
    other = np.where(paired, eager, np.where(has_base, own[np.where(has_base, base, 0)], own))
    compared = (paired | has_base) & np.isfinite(columns["device_speedup"].to_numpy(float))
    columns["host_dependent"] = compared & (own != other)
    return columns[DEVICE_COLUMNS]
