"""Two sweeps compared: their matched cells, each completed in both with measured steps, with

    step ratio        B's median step / A's (above 1: B is slower)
    throughput ratio  B's end-to-end items/s / A's (below 1: B is slower)
    GPU time ratio    B's GPU time per step / A's, and both hosts' µs per launch
    probe ratio       B's host probe / A's, measured apart from the steps, and the step ratio the
                      host model predicts from it; where each ran (host_probe.py)

with their intervals (ratios.py, host_probe.py) and verdicts (verdicts.py); the cells in both but not
completed in both, and those only one sweep has. And per compiled backend, the speedup over eager
(analyze's `speedup`, the paired one where a cell measured paired) of the cells that have one in
both sweeps: its geometric mean in A and in B, and the cell whose speedup changed most. A suite run
twice is read there: a model's speedup may move with the machine while the mean holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.cells.device_time import completed_runs, device_side
from analysis.cells.loaded import Loaded
from analysis.compare.host_probe import host_names, predicted_ratio, probe_ratios
from analysis.compare.matching import MATCHED_AXES, match
from analysis.compare.ratios import gpu_ratios, wall_ratios
from analysis.compare.verdicts import REGRESSION, THRESHOLD, classify, notes, verdicts
from analysis.reading.axes import backend_labels
from analysis.statistics.bootstrap import geometric_mean
from workloads.contract.vocabulary import BASELINE_BACKEND, COMPLETED

#: The columns of the speedup summary (JSON's `speedups` records), one row per compiled backend.
SPEEDUP_COLUMNS = [
    "backend",
    "cells",
    "a_geomean_speedup",
    "b_geomean_speedup",
    "geomean_ratio",
    "a_geomean_device_speedup",
    "b_geomean_device_speedup",
    "most_changed",
    "most_changed_a",
    "most_changed_b",
]
#: The columns of a compared cell (JSON's `cells` records). `step_verdict`: the wall step's reading,
#: `gpu_verdict`: the GPU time's, `verdict`: the cell's (a host change where they part that way),
#: `verdict_note`: what a moved cell's verdict rests on (verdicts.py); `a_hosts`, `b_hosts`: where its
#: completed runs ran, `node (CPU model)`.
COLUMNS = [
    "label",
    "a_cell_id",
    "b_cell_id",
    *MATCHED_AXES,
    "a_gpu_name",
    "b_gpu_name",
    "a_median_step_ms",
    "b_median_step_ms",
    "step_ratio",
    "step_ratio_low",
    "step_ratio_high",
    "a_e2e_items_per_s",
    "b_e2e_items_per_s",
    "throughput_ratio",
    "throughput_ratio_low",
    "throughput_ratio_high",
    "interval",
    "a_gpu_ms_per_step",
    "b_gpu_ms_per_step",
    "gpu_ratio",
    "gpu_ratio_low",
    "gpu_ratio_high",
    "gpu_interval",
    "a_launches_per_step",
    "b_launches_per_step",
    "a_us_per_launch",
    "b_us_per_launch",
    "a_probe_us",
    "b_probe_us",
    "probe_ratio",
    "probe_ratio_low",
    "probe_ratio_high",
    "probe_interval",
    "predicted_step_ratio",
    "a_hosts",
    "b_hosts",
    "step_verdict",
    "gpu_verdict",
    "verdict",
    "verdict_note",
]


@dataclass
class Comparison:
    """Two sweeps' matched cells (`cells`, COLUMNS) and those that could not be compared."""

    threshold: float
    cells: pd.DataFrame
    only_in_a: pd.DataFrame
    only_in_b: pd.DataFrame
    not_compared: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Cells in both, not completed with measured steps in both: their key and both statuses."""
    speedups: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SPEEDUP_COLUMNS))
    """Per compiled backend, the speedups over eager of the cells with one in both (SPEEDUP_COLUMNS)."""

    @property
    def regressions(self) -> pd.DataFrame:
        return self.cells[self.cells["verdict"] == REGRESSION]


def _speedups(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """SPEEDUP_COLUMNS of the matched cells `a` and `b` (same keys, same order)."""
    both = (
        (a["backend"] != BASELINE_BACKEND).to_numpy()
        & (a["speedup"].to_numpy(float) > 0)
        & (b["speedup"].to_numpy(float) > 0)
    )  # NaN: no speedup (no eager cell, or not completed)
    a, b = a[both], b[both]
    rows = []
    for backend, keys in a.groupby(backend_labels(a), sort=False).groups.items():
        a_speedup, b_speedup = a.loc[keys, "speedup"].to_numpy(float), b.loc[keys, "speedup"].to_numpy(float)
        a_mean, b_mean = geometric_mean(a_speedup)[0], geometric_mean(b_speedup)[0]
        # The GPU time's speedup, which a host does not move: NaN where a cell of either sweep has none.
        a_device, b_device = (side.loc[keys, "device_speedup"].to_numpy(float) for side in (a, b))
        known = np.isfinite(a_device).all() and np.isfinite(b_device).all()
        most = int(np.argmax(np.abs(np.log(b_speedup / a_speedup))))
        rows.append(
            {
                "backend": backend,
                "cells": len(keys),
                "a_geomean_speedup": a_mean,
                "b_geomean_speedup": b_mean,
                "geomean_ratio": b_mean / a_mean,
                "a_geomean_device_speedup": geometric_mean(a_device)[0] if known else np.nan,
                "b_geomean_device_speedup": geometric_mean(b_device)[0] if known else np.nan,
                "most_changed": a.loc[keys, "label"].iloc[most],
                "most_changed_a": a_speedup[most],
                "most_changed_b": b_speedup[most],
            }
        )
    return pd.DataFrame(rows, columns=SPEEDUP_COLUMNS)


def compare(sweep_a: Loaded, sweep_b: Loaded, threshold: float = THRESHOLD) -> Comparison:
    """Match the cells of two opened sweeps (analysis/cells/loaded.py `open_sweep`) and compare B with
    A; CompareError where there is nothing to compare."""
    data = [sweep_a.data, sweep_b.data]
    matched = match(sweep_a.metrics, sweep_b.metrics, sweep_a.sweep_dir, sweep_b.sweep_dir)
    a, b = matched.a, matched.b
    done = (
        (a["status"] == COMPLETED)
        & (b["status"] == COMPLETED)
        & a["median_step_ms"].notna()
        & b["median_step_ms"].notna()
    ).to_numpy()
    a, b, rest = a[done], b[done], (a[~done], b[~done])
    ids_a, ids_b = a["cell_id"].tolist(), b["cell_id"].tolist()
    wall = wall_ratios(data[0], data[1], ids_a, ids_b)
    runs_a, runs_b = (completed_runs(sweep.replicates, ids) for sweep, ids in zip(data, (ids_a, ids_b)))
    device_a, device_b = device_side(runs_a, len(ids_a)), device_side(runs_b, len(ids_b))
    gpu = gpu_ratios(device_a, device_b)
    probe = probe_ratios(runs_a, runs_b, len(ids_a))
    value = lambda frame, column: frame[column].to_numpy(float)  # noqa: E731
    step_ratio = value(b, "median_step_ms") / value(a, "median_step_ms")
    predicted = predicted_ratio(device_a, device_b, probe.ratio)
    step_verdict = verdicts(wall.step_low, wall.step_high, threshold)
    verdict, gpu_verdict = classify(
        step_verdict, step_ratio, gpu, device_a, device_b, probe, predicted, threshold
    )
    items = value(b, "items_per_step") / value(a, "items_per_step")
    cells = pd.DataFrame({
        "label": a["label"].to_numpy(),
        "a_cell_id": ids_a, "b_cell_id": ids_b,
        **{axis: a[axis].to_numpy() for axis in MATCHED_AXES},
        "a_gpu_name": a["gpu_name"].to_numpy(), "b_gpu_name": b["gpu_name"].to_numpy(),
        "a_median_step_ms": value(a, "median_step_ms"), "b_median_step_ms": value(b, "median_step_ms"),
        "step_ratio": step_ratio, "step_ratio_low": wall.step_low, "step_ratio_high": wall.step_high,
        "a_e2e_items_per_s": value(a, "e2e_items_per_s"), "b_e2e_items_per_s": value(b, "e2e_items_per_s"),
        "throughput_ratio": value(b, "e2e_items_per_s") / value(a, "e2e_items_per_s"),
        "throughput_ratio_low": wall.rate_low * items, "throughput_ratio_high": wall.rate_high * items,
        "interval": wall.interval,
        "a_gpu_ms_per_step": device_a.gpu_ms_per_step, "b_gpu_ms_per_step": device_b.gpu_ms_per_step,
        "gpu_ratio": gpu.ratio, "gpu_ratio_low": gpu.low, "gpu_ratio_high": gpu.high,
        "gpu_interval": gpu.interval,
        "a_launches_per_step": device_a.launches_per_step, "b_launches_per_step": device_b.launches_per_step,
        "a_us_per_launch": device_a.us_per_launch, "b_us_per_launch": device_b.us_per_launch,
        "a_probe_us": probe.a_us, "b_probe_us": probe.b_us, "probe_ratio": probe.ratio,
        "probe_ratio_low": probe.low, "probe_ratio_high": probe.high, "probe_interval": probe.interval,
        "predicted_step_ratio": predicted,
        "a_hosts": host_names(runs_a, len(ids_a)), "b_hosts": host_names(runs_b, len(ids_b)),
        "step_verdict": step_verdict, "gpu_verdict": gpu_verdict, "verdict": verdict,
        "verdict_note": notes(verdict, gpu, device_a, device_b, probe, predicted),
    })  # fmt: skip
    not_compared = pd.DataFrame(
        {
            "label": rest[0]["label"].to_numpy(),
            "a_cell_id": rest[0]["cell_id"].to_numpy(),
            "b_cell_id": rest[1]["cell_id"].to_numpy(),
            "a_status": rest[0]["status"].to_numpy(),
            "b_status": rest[1]["status"].to_numpy(),
        }
    )
    return Comparison(
        threshold,
        cells[COLUMNS],
        matched.only_in_a,
        matched.only_in_b,
        not_compared,
        _speedups(matched.a, matched.b),
    )
