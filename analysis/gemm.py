"""GEMM cells (`model=gemm`): one row per shape and implementation, µs per GEMM against the roofline.

A GEMM cell times one matrix multiply, M x K by K x N, as CUDA-graph replays: its step is one replay
and `step_time_ms` the ms per GEMM, so its median step and the interval of it are the existing
two-level bootstrap (analysis/stats.py). Its own columns (`gemm_*`, `fp8_recipe`, `peak_gbps`) come
from collect.py's replicate rows (`GEMM_READ`); the training tables use none of them. A sweep without
GEMM cells has no GEMM table. An implementation is precision (+ fp8 recipe) x backend: eager is cuBLAS.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.axes import reference_positions
from analysis.collect import GEMM_READ, SweepData
from analysis.metrics import RESAMPLES, median_draws
from analysis.render import Table, fmt_number, fmt_percent, fmt_speedup, is_null
from analysis.stats import percentile_interval, ratio_interval
from workloads.contract.vocabulary import BASELINE_BACKEND, COMPLETED, backend_label

GEMM_MODEL = "gemm"
GEMM_TABLE = "gemm"
SHAPE = ["gemm_m", "gemm_n", "gemm_k"]
#: The GEMM cell's own columns, as collect.py reads them (absent in older files: null).
RUN_COLUMNS = [*SHAPE, "fp8_recipe", *GEMM_READ]
#: Where one shape's implementations are compared: the same shape on the same kind of GPU.
SAME_SHAPE = [*SHAPE, "gpu_name"]
BF16, FP8 = "bf16", "fp8"
#: Our own bootstrap stream (metrics.py's are 0-4): these draws are independent of the training tables'.
_STREAM = (26,)


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


def _run_rows(replicates: pd.DataFrame) -> pd.DataFrame:
    """RUN_COLUMNS of each GEMM cell: the median of its completed replicates' values (the first for
    text), or of its attempt that counts where none completed."""
    rows = []
    for cell_id, runs in replicates.groupby("cell_id", sort=False):
        done = runs[runs["status"] == COMPLETED]
        own = done if len(done) else runs
        row = {"cell_id": cell_id}
        for column in RUN_COLUMNS:
            values = own[column].dropna()
            numeric = pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)
            row[column] = (values.median() if numeric else values.iloc[0]) if len(values) else None
        rows.append(row)
    return pd.DataFrame(rows, columns=["cell_id", *RUN_COLUMNS])


def _references(cells: pd.DataFrame, precision: str) -> np.ndarray:
    """Position of each cell's completed cuBLAS cell of `precision` at its shape and GPU (-1: none); an
    fp8 row against fp8 takes its own recipe's, any other row the representative of every recipe."""
    cublas = (cells["backend"] == BASELINE_BACKEND) & (cells["precision"] == precision)
    any_recipe = reference_positions(cells, SAME_SHAPE, cublas)
    if precision != FP8:
        return any_recipe
    own_recipe = reference_positions(cells, [*SAME_SHAPE, "fp8_recipe"], cublas)
    return np.where(cells["precision"] == FP8, own_recipe, any_recipe)


def _speedups(cells: pd.DataFrame, draws: np.ndarray, precision: str, column: str) -> None:
    """`column` (+ `_low`, `_high`): the µs of the cuBLAS cell of `precision` at the same shape over each
    cell's, with the 95% interval of the draws' ratio."""
    value, low, high = (np.full(len(cells), np.nan) for _ in range(3))
    for i, ref in enumerate(_references(cells, precision)):
        if ref < 0 or cells.at[i, "status"] != COMPLETED:
            continue
        value[i] = cells.at[ref, "us"] / cells.at[i, "us"]
        (low[i],), (high[i],) = ratio_interval(draws[[ref]], draws[[i]])
    cells[column], cells[f"{column}_low"], cells[f"{column}_high"] = value, low, high


def gemm_cells(data: SweepData, metrics: pd.DataFrame, resamples: int = RESAMPLES) -> pd.DataFrame:
    """One row per GEMM cell (empty without any): its shape, implementation, µs per GEMM with its 95%
    interval, TFLOP/s, GB/s, roofline floor and share, bound, kernel, the autotuner's µs, its
    speedups over bf16 cuBLAS and fp8 cuBLAS at the same shape, and the GPU's J per GEMM and power
    (analysis/energy.py: a GEMM cell's J per step is per GEMM)."""
    ours = metrics[gemm_mask(metrics)]
    if ours.empty:
        return pd.DataFrame()
    base = ours[
        [
            "cell_id",
            "status",
            "precision",
            "backend",
            "compile_mode",
            "gpu_name",
            "median_step_ms",
            "measured_steps",
            *_cols("joules_per_step"),
            "avg_power_w",
        ]
    ]
    replicates = data.replicates[data.replicates["cell_id"].isin(ours["cell_id"])]
    cells = base.merge(_run_rows(replicates), on="cell_id", how="left").reset_index(drop=True)
    draws = median_draws(cells, data.steps, resamples, _STREAM) * 1e3  # ms -> µs
    cells["us"] = cells["median_step_ms"].astype(float) * 1e3
    cells["us_low"], cells["us_high"] = percentile_interval(draws)
    m, n, k = (cells[c].astype(float) for c in SHAPE)
    cells["implementation"] = [
        implementation(*values)
        for values in cells[["precision", "fp8_recipe", "backend", "compile_mode"]].values
    ]
    cells["tflops"] = 2 * m * n * k / (cells["us"] * 1e6)  # FLOP / µs / 1e6 = TFLOP/s
    cells["gbps"] = cells["gemm_bytes"].astype(float) / (cells["us"] * 1e3)  # bytes / µs / 1e3 = GB/s
    cells["floor_share"] = cells["gemm_floor_us"].astype(float) / cells["us"]
    cells["autotune_ratio"] = cells["us"] / cells["gemm_autotune_us"].astype(float)
    _speedups(cells, draws, BF16, "vs_bf16_cublas")
    _speedups(cells, draws, FP8, "vs_fp8_cublas")
    order = cells.sort_values([*SHAPE, "precision", "fp8_recipe", "backend"], na_position="first").index
    return cells.loc[order].drop(columns="median_step_ms").reset_index(drop=True)


def _with_interval(value: object, low: object, high: object) -> str:
    """`25.6 [25.4, 25.9]` (µs, or any value with its interval)."""
    if is_null(value):
        return ""
    interval = "" if is_null(low) or is_null(high) else f" [{fmt_number(low)}, {fmt_number(high)}]"
    return f"{fmt_number(value)}{interval}"


def gemm_table(cells: pd.DataFrame) -> Table:
    """The GEMM cells as a table: one row per (M, N, K, implementation)."""
    done = cells["status"] == COMPLETED
    millijoules = cells[_cols("joules_per_step")].to_numpy(float) * 1e3
    text = pd.DataFrame({
        "M": cells["gemm_m"].map(_whole), "N": cells["gemm_n"].map(_whole), "K": cells["gemm_k"].map(_whole),
        "implementation": cells["implementation"],
        "µs [95%]": [_with_interval(*v) if ok else s for v, ok, s in
                     zip(cells[["us", "us_low", "us_high"]].values, done, cells["status"])],
        "TFLOP/s": cells["tflops"].map(fmt_number), "GB/s": cells["gbps"].map(fmt_number),
        "floor µs": cells["gemm_floor_us"].map(fmt_number),
        "of floor": cells["floor_share"].map(lambda v: fmt_percent(v, 0)),
        "bound": cells["gemm_bound"].fillna(""), "kernel": cells["gemm_kernel"].fillna(""),
        "autotune µs": cells["gemm_autotune_us"].map(fmt_number),
        "measured / autotune": cells["autotune_ratio"].map(fmt_speedup),
        "vs bf16 cuBLAS": [fmt_speedup(*v) for v in cells[_cols("vs_bf16_cublas")].values],
        "vs fp8 cuBLAS": [fmt_speedup(*v) for v in cells[_cols("vs_fp8_cublas")].values],
        "mJ per GEMM": [_with_interval(*v) for v in millijoules],
        "W": cells["avg_power_w"].map(fmt_number),
        "cell": cells["cell_id"],
    })  # fmt: skip
    note = (
        "µs per GEMM: median over the replays (each replay's time / its GEMMs), median over runs, with its "
        "95% bootstrap interval over runs, then replays. TFLOP/s = 2MNK / µs; GB/s = bytes / µs; floor = "
        "max(FLOPs / peak FLOP/s, bytes / peak bandwidth), and `of floor` the floor / measured (100%: at the "
        "roofline). `measured / autotune`: the replay's µs over the autotuner's own timing of its choice "
        "(above 1: the autotuner ranked it faster than it runs). Speedups: the cuBLAS cell's µs at the same "
        "shape and GPU / this one's (fp8: of the same recipe), with the interval of the ratio. mJ per GEMM: "
        "the GPU board's energy over the measured window's GEMMs (NVML's counter), median over runs (its "
        "interval from two runs on); W: the window's mean power."
    )
    return Table(GEMM_TABLE, "GEMMs: µs per GEMM against the roofline", cells, text, note)


def _cols(name: str) -> list[str]:
    return [name, f"{name}_low", f"{name}_high"]


def _whole(value: object) -> str:
    return "" if is_null(value) else str(int(value))
