"""The hosts of two sweeps' matched cells, measured apart from the steps under test: the host probe, the
step the host model predicts from it, and where the cells ran.

Each process takes the host probe right before measuring and right after (`host_py_us`,
`host_py_us_after`: workloads/instruments/host_load.py): µs per 100 iterations of a fixed pure-Python
loop, the same in every cell, which neither the code under test nor a new torch moves (the tiny torch
op `host_op_us` moves with torch's dispatcher, so it is shown, not weighed). Per matched cell and
sweep, from its completed runs: B/A of the probe with its 95% interval, Welch's over the runs' probes
(each the geometric mean of its two) where both sides ran 2 runs or more, else Welch's over the probes
themselves, before and after, which sees one process only (`within one process`, as for the GPU
time). The hosts differ where that interval excludes 1: beyond the probe's noise over a measured
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


def _probe_logs(runs: pd.DataFrame, n: int) -> tuple[RunLogs, RunLogs]:
    """(each run's probe: the geometric mean of its before and after, every probe value) per cell."""
    code = runs["code"].to_numpy(np.int64)
    values = np.column_stack([runs[column].to_numpy(float) for column in PROBE_COLUMNS])
    known = values > 0  # NaN: not measured (the probe after measuring, before issue 50)
    with np.errstate(invalid="ignore", divide="ignore"):
        logs = np.where(known, np.log(np.where(known, values, 1.0)), 0.0)
        per_run = np.exp(logs.sum(axis=1) / known.sum(axis=1))  # NaN where a run has neither
    return (
        RunLogs.from_values(code, per_run, n),
        RunLogs.from_values(np.repeat(code, len(PROBE_COLUMNS)), values.ravel(), n),
    )


def probe_ratios(runs_a: pd.DataFrame, runs_b: pd.DataFrame, n: int) -> ProbeRatios:
    """B/A of the probe of `n` matched cells from each side's `completed_runs` (module docstring)."""
    (a_runs, a_values), (b_runs, b_values) = _probe_logs(runs_a, n), _probe_logs(runs_b, n)
    across = across_runs(a_runs.count, b_runs.count)
    run_low, run_high = welch_interval(b_runs, a_runs)
    value_low, value_high = welch_interval(b_values, a_values)
    measured = (a_runs.count > 0) & (b_runs.count > 0)
    a_us = np.where(a_runs.count > 0, np.exp(a_runs.mean), np.nan)
    b_us = np.where(b_runs.count > 0, np.exp(b_runs.mean), np.nan)
    return ProbeRatios(
        a_us,
        b_us,
        b_us / a_us,
        np.where(across, run_low, value_low),
        np.where(across, run_high, value_high),
        np.where(measured, run_counts_text(a_runs.count, b_runs.count), None),
    )


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
