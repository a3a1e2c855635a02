"""The hosts of two sweeps' matched cells, measured apart from the steps under test: the host probe, the
step the host model predicts from it, and where the cells ran.

Each process takes the host probe right before measuring and right after (`host_py_us`,
`host_py_us_after`: workloads/instruments/host_load.py): µs per 100 iterations of a fixed pure-Python
loop, the same in every cell, which neither the code under test nor a new torch moves (the tiny torch
op `host_op_us` moves with torch's dispatcher: recorded beside it, not weighed). Per matched cell and
sweep, from its completed runs: B/A of the probe with its 95% interval, Welch's over the runs' probes
(each the geometric mean of its two) where both sides ran 2 runs or more. A side of one run has no
spread of its own: its run counts as one draw from its sweep's runs, whose spread (over the completed
runs of all its compared cells, other processes at other moments, as the cell's own runs would be)
and degrees of freedom stand for it (`one run: the sweep's spread`); a sweep of one run has none, and
no interval. The hosts differ where the interval excludes 1: beyond the probe's noise over a measured
window and between processes. Sweeps before issue 50 have no probe: no host change there.

The host model (analysis/cells/device_time.py `predicted_step_ms`) fed with the probe ratio: B's step
over A's is predicted as

    max(GPU_B, launches_B x µs per launch_A x probe ratio) / max(GPU_A, launches_A x µs per launch_A)

A launch-bound side's host part scales with the probe; a GPU-bound one's step stays the GPU's. Where
launches were not counted (sweeps before issue 39) there is no prediction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.cells.device_time import DeviceSide, predicted_step_ms
from analysis.cells.uncertainty import across_runs
from analysis.compare.ratios import run_counts_text
from analysis.statistics.intervals import RunLogs, welch_interval

#: The run columns of the probe: before and after measuring.
PROBE_COLUMNS = ("host_py_us", "host_py_us_after")


@dataclass(frozen=True)
class ProbeRatios:
    """Per matched cell: each side's probe (geometric mean over its runs, µs), B/A with its 95% interval
    and what the interval rests on (None where a side has no probe)."""

    a_us: np.ndarray
    b_us: np.ndarray
    ratio: np.ndarray
    low: np.ndarray
    high: np.ndarray
    interval: np.ndarray

    @property
    def beyond_noise(self) -> np.ndarray:
        """Whether the hosts differ: the interval excludes 1 (False where unknown)."""
        return (self.low > 1) | (self.high < 1)


#: What a probe interval of a cell with one run on a side rests on.
SWEEP_SPREAD = "one run: the sweep's spread"


def _probe_logs(runs: pd.DataFrame, n: int) -> RunLogs:
    """Per cell, the logs of its runs' probes (each the geometric mean of the run's before and after);
    where it has one run, with its sweep's spread between runs (module docstring)."""
    code = runs["code"].to_numpy(np.int64)
    values = np.column_stack([runs[column].to_numpy(float) for column in PROBE_COLUMNS])
    known = values > 0  # NaN: not measured
    with np.errstate(invalid="ignore", divide="ignore"):
        logs = np.where(known, np.log(np.where(known, values, 1.0)), 0.0)
        per_run = np.exp(logs.sum(axis=1) / known.sum(axis=1))  # NaN where a run has neither
    cells = RunLogs.from_values(code, per_run, n)
    sweep = RunLogs.from_values(np.zeros(len(runs), np.int64), per_run, 1)
    if sweep.count[0] < 2:
        return cells
    # One run: its variance is one draw's from the sweep's runs (sd^2 / 1) with their degrees of freedom,
    # written as the RunLogs of sweep.count runs whose sd^2 / count is that.
    one = cells.count == 1
    return RunLogs(
        np.where(one, sweep.count[0], cells.count),
        cells.mean,
        np.where(one, sweep.sd[0] * np.sqrt(sweep.count[0]), cells.sd),
    )


def probe_ratios(runs_a: pd.DataFrame, runs_b: pd.DataFrame, n: int) -> ProbeRatios:
    """B/A of the probe of `n` matched cells from each side's `completed_runs` (module docstring)."""
    a_runs, b_runs = _probe_logs(runs_a, n), _probe_logs(runs_b, n)
    own = [np.bincount(runs["code"].to_numpy(np.int64), minlength=n) for runs in (runs_a, runs_b)]
    low, high = welch_interval(b_runs, a_runs)
    measured = (a_runs.count > 0) & (b_runs.count > 0)
    a_us = np.where(a_runs.count > 0, np.exp(a_runs.mean), np.nan)
    b_us = np.where(b_runs.count > 0, np.exp(b_runs.mean), np.nan)
    text = np.where(across_runs(*own), run_counts_text(*own), SWEEP_SPREAD)
    return ProbeRatios(a_us, b_us, b_us / a_us, low, high, np.where(measured, text, None))


def predicted_ratio(a: DeviceSide, b: DeviceSide, probe: np.ndarray) -> np.ndarray:
    """B's step / A's by the host model fed with the probe ratio `probe` (module docstring); NaN where
    a side has no GPU time or launches, or there is no probe."""
    at_b = predicted_step_ms(b.gpu_ms_per_step, b.launches_per_step, a.us_per_launch * probe)
    return at_b / predicted_step_ms(a.gpu_ms_per_step, a.launches_per_step, a.us_per_launch)


def host_names(runs: pd.DataFrame, n: int) -> np.ndarray:
    """Per cell, where its completed runs ran: its distinct `node (CPU model)`, comma-joined, sorted
    (None where none recorded)."""
    out = np.full(n, None, dtype=object)
    if not len(runs):
        return out
    node = runs["node_name"].astype(object).where(runs["node_name"].notna(), "?")
    cpu = runs["cpu_model"].astype(object).where(runs["cpu_model"].notna(), "?")
    text = node.astype(str) + " (" + cpu.astype(str) + ")"
    known = runs["node_name"].notna() | runs["cpu_model"].notna()
    for code, names in text[known].groupby(runs["code"][known]):
        out[int(code)] = ", ".join(sorted(set(names)))
    return out
