"""GEMM cells (`model=gemm`): one row per shape and implementation, µs per GEMM against the roofline.

A GEMM cell times one matrix multiply, M x K by K x N, as CUDA-graph replays: its step is one replay
and `step_time_ms` the ms per GEMM, so its median step and the interval of it are the existing
two-level bootstrap (analysis/statistics/bootstrap.py). Its own columns (`gemm_*`, `fp8_recipe`,
`peak_gbps`) come from collect.py's replicate rows (`GEMM_READ`); the training tables use none of
them. A sweep without GEMM cells has no GEMM table (analysis/studies/gemm/). An implementation is
precision (+ fp8 recipe) x backend: eager is cuBLAS, `triton_base`/`triton_splitk` the FP8 post's
Triton kernels (`gemm.kernel`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.cells.uncertainty import RESAMPLES, median_intervals, median_ratio_intervals
from analysis.reading.axes import reference_positions
from analysis.reading.collect import GEMM_READ, SweepData
from analysis.rendering.text import is_null
from workloads.contract.vocabulary import (
    BASELINE_BACKEND,
    COMPLETED,
    GEMM_KERNELS,
    NO_CLOCK_LIMITS,
    backend_label,
)

GEMM_MODEL = "gemm"
SHAPE = ["gemm_m", "gemm_n", "gemm_k"]
#: The GEMM cell's own columns, as collect.py reads them (absent in older files: null).
RUN_COLUMNS = [*SHAPE, "fp8_recipe", *GEMM_READ]
#: Where one shape's implementations are compared: the same shape on the same kind of GPU, timed the
#: same way (`gemm_timing`: a burst's µs and a sustained one's are different quantities).
SAME_SHAPE = [*SHAPE, "gemm_timing", "gpu_name"]
BF16, FP8 = "bf16", "fp8"
#: The backend axis of the FP8 post's Triton kernels (`gemm.kernel`): data-parallel and SplitK.
TRITON_BASE, TRITON_SPLITK = GEMM_KERNELS
#: Our own bootstrap stream (metrics.py's are 0-4): these draws are independent of the training tables'.
_STREAM = (26,)


def interval_columns(name: str) -> list[str]:
    """`name` and its 95% interval's ends: [name, name_low, name_high]."""
    return [name, f"{name}_low", f"{name}_high"]


def gemm_mask(metrics: pd.DataFrame) -> pd.Series:
    """Which cells are GEMM cells: they time one matrix multiply, not a training step."""
    return metrics["model"] == GEMM_MODEL


def implementation(precision: object, recipe: object, backend: object, mode: object) -> str:
    """`bf16 cuBLAS`, `fp8 rowwise inductor (max-autotune-no-cudagraphs)`."""
    dtype = "?" if is_null(precision) else str(precision) if is_null(recipe) else f"{precision} {recipe}"
    kernel = (
        "cuBLAS" if backend == BASELINE_BACKEND else backend_label({"backend": backend, "compile_mode": mode})
    )
    return f"{dtype} {kernel}"


def run_rows(replicates: pd.DataFrame, columns: list[str] = RUN_COLUMNS) -> pd.DataFrame:
    """`columns` of each GEMM cell: the median of its completed replicates' values (the first for
    text), or of its attempt that counts where none completed."""
    rows = []
    for cell_id, runs in replicates.groupby("cell_id", sort=False):
        done = runs[runs["status"] == COMPLETED]
        own = done if len(done) else runs
        row = {"cell_id": cell_id}
        for column in columns:
            values = own[column].dropna()
            numeric = pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)
            row[column] = (values.median() if numeric else values.iloc[0]) if len(values) else None
        row["clock_limits"] = _any_limits(own["clock_limits"].dropna())
        rows.append(row)
    return pd.DataFrame(rows, columns=["cell_id", *columns])


def _any_limits(limits: pd.Series) -> str | None:
    """The clock limits (`sw_power_cap,sw_thermal`) of any of a cell's replicates: `none` where none
    had one; None where none was measured."""
    names = dict.fromkeys(name for text in limits for name in text.split(",") if name != NO_CLOCK_LIMITS)
    return (",".join(names) or NO_CLOCK_LIMITS) if len(limits) else None


def _references(cells: pd.DataFrame, precision: str, backend: str) -> np.ndarray:
    """Position of each cell's completed `backend` cell of `precision` at its shape and GPU (-1: none);
    an fp8 row against fp8 takes its own recipe's, any other row the representative of every recipe."""
    reference = (cells["backend"] == backend) & (cells["precision"] == precision)
    any_recipe = reference_positions(cells, SAME_SHAPE, reference)
    if precision != FP8:
        return any_recipe
    own_recipe = reference_positions(cells, [*SAME_SHAPE, "fp8_recipe"], reference)
    return np.where(cells["precision"] == FP8, own_recipe, any_recipe)


def _speedups(
    cells: pd.DataFrame,
    steps: pd.DataFrame,
    resamples: int,
    precision: str,
    column: str,
    backend: str = BASELINE_BACKEND,
) -> None:
    """`column` (+ `_low`, `_high`): the µs of the `backend` cell of `precision` at the same shape (the
    cuBLAS cell unless told) over each cell's, with the 95% interval of the speedups
    (`median_ratio_intervals`)."""
    value, low, high = (np.full(len(cells), np.nan) for _ in range(3))
    reference = _references(cells, precision, backend)
    which = np.flatnonzero((reference >= 0) & (cells["status"] == COMPLETED).to_numpy())
    us = cells["us"].to_numpy(float)
    value[which] = us[reference[which]] / us[which]
    if len(which):
        low[which], high[which] = median_ratio_intervals(
            cells, steps, reference[which], which, resamples, _STREAM
        )
    cells[column], cells[f"{column}_low"], cells[f"{column}_high"] = value, low, high


def measured_cells(
    data: SweepData, base: pd.DataFrame, columns: list[str], resamples: int, stream: tuple[int, ...]
) -> pd.DataFrame:
    """`base` (metrics rows of GEMM cells) with `columns` of their replicates (`run_rows`), `us` (µs per
    replayed GEMM, or layer) with its 95% interval from our bootstrap `stream`, and `implementation`."""
    replicates = data.replicates[data.replicates["cell_id"].isin(base["cell_id"])]
    cells = base.merge(run_rows(replicates, columns), on="cell_id", how="left").reset_index(drop=True)
    cells["us"] = cells["median_step_ms"].astype(float) * 1e3
    low, high = median_intervals(cells, data.steps, resamples, stream)
    cells["us_low"], cells["us_high"] = low * 1e3, high * 1e3  # ms -> µs
    cells["implementation"] = [
        implementation(*values)
        for values in cells[["precision", "fp8_recipe", "backend", "compile_mode"]].values
    ]
    return cells


def gemm_cells(data: SweepData, metrics: pd.DataFrame, resamples: int = RESAMPLES) -> pd.DataFrame:
    """One row per GEMM cell (empty without any): its shape, implementation, timing mode, µs per GEMM
    with its 95% interval, TFLOP/s, GB/s, roofline floor and share, bound, kernel, the autotuner's µs,
    its speedups over bf16 cuBLAS, fp8 cuBLAS and the base Triton fp8 kernel at the same shape and
    timing, the GPU's J per GEMM and power (analysis/cells/energy.py: a GEMM cell's J per step is per
    GEMM), and its mean SM clock and clock limits while it ran (null: not measured)."""
    ours = metrics[gemm_mask(metrics) & metrics["gemm_layer"].isna()]  # a layer's: gemm_layer.py
    if ours.empty:
        return pd.DataFrame()
    base = ours[
        [
            "cell_id",
            "status",
            "precision",
            "backend",
            "compile_mode",
            "gemm_timing",
            "gpu_name",
            "median_step_ms",
            "measured_steps",
            *interval_columns("joules_per_step"),
            "avg_power_w",
        ]
    ]
    cells = measured_cells(data, base, RUN_COLUMNS, resamples, _STREAM)
    m, n, k = (cells[c].astype(float) for c in SHAPE)
    cells["tflops"] = 2 * m * n * k / (cells["us"] * 1e6)  # FLOP / µs / 1e6 = TFLOP/s
    cells["gbps"] = cells["gemm_bytes"].astype(float) / (cells["us"] * 1e3)  # bytes / µs / 1e3 = GB/s
    cells["floor_share"] = cells["gemm_floor_us"].astype(float) / cells["us"]
    cells["autotune_ratio"] = cells["us"] / cells["gemm_autotune_us"].astype(float)
    _speedups(cells, data.steps, resamples, BF16, "vs_bf16_cublas")
    _speedups(cells, data.steps, resamples, FP8, "vs_fp8_cublas")
    _speedups(cells, data.steps, resamples, FP8, "vs_triton_base", TRITON_BASE)
    order = cells.sort_values(
        [*SHAPE, "gemm_timing", "precision", "fp8_recipe", "backend"], na_position="first"
    ).index
    return cells.loc[order].drop(columns="median_step_ms").reset_index(drop=True)
