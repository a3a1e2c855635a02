"""Per-cell metrics of a sweep: one row per cell, numbers over its measured steps.

Step statistics come from the measured steps (`phase == "measure"`) of the attempt that counts,
so warm-up and compilation never leak into them; compile time is the workload's own
`compile_time_s`. Only `completed` cells get numbers: a failed or `not_compiled` cell stays in
the frame with its status, but what it measured is not a result (a `not_compiled` cell ran
eagerly while claiming a compiled backend).

Comparisons are against the eager cell of the same workload (SAME_WORKLOAD equal, only the
backend differs): speedup = eager median step / own median step, with a 95% bootstrap interval
from resampling both cells' measured steps; peak-memory ratio; the largest relative difference of
the loss at equal steps (same seed: compiled training should follow eager's curve; dropout and
low precision make it differ a little).
"""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

from analysis.collect import SweepData
from analysis.render import is_null
from analysis.stats import SortedSamples, group_mean_std, group_ratio_of_sums, percentile_interval

#: Cells compared with each other must agree on all of these; only the backend may differ.
SAME_WORKLOAD = ["model", "arch", "size", "precision", "batch_size", "grad_accum", "data_source", "seed",
                 "device", "gpu_name"]
#: What names a cell in tables and plots, besides its id.
AXES = ["model", "arch", "size", "backend", "compile_mode", "precision", "batch_size", "grad_accum",
        "data_source", "seed", "device", "gpu_name"]
METRIC_COLUMNS = [
    "status", "error", "measured_steps", "mean_step_ms", "std_step_ms", "median_step_ms", "p5_step_ms",
    "p95_step_ms", "items_per_s", "mfu_mean", "mfu_std", "speedup", "speedup_low", "speedup_high",
    "baseline_cell_id", "compile_time_s", "first_step_ms", "peak_mem_bytes", "peak_mem_ratio", "graph_count",
    "graph_break_count", "recompile_count", "loss_max_rel_diff", "data_wait_share",
]  # fmt: skip
CELL_COLUMNS = ["cell_id", *AXES, *METRIC_COLUMNS]
COUNT_COLUMNS = ["measured_steps", "graph_count", "graph_break_count", "recompile_count", "peak_mem_bytes",
                 "batch_size", "grad_accum", "seed"]
#: Our step statistics that the workload's run row summarises too (our name: its column): what a
#: completed cell whose steps file is missing or unreadable still has.
RUN_SUMMARY = {"measured_steps": "measured_steps", "mean_step_ms": "mean_step_ms", "std_step_ms": "std_step_ms",
               "median_step_ms": "median_step_ms", "items_per_s": "items_per_s", "mfu_mean": "mfu"}
SIZE_ORDER = {"tiny": 0, "small": 1, "medium": 2, "large": 3, "xl": 4}
#: Bootstrap resamples of each cell's measured steps, and the seed that, with the cell's id, seeds
#: its generator: a cell gets the same interval in every analysis, alone or in any sweep.
RESAMPLES, SEED = 1000, 0


def backend_label(backend: object, mode: object) -> str:
    """`inductor`, `inductor (max-autotune)`: the backend with its mode where it is not the default."""
    backend = backend if isinstance(backend, str) else "?"
    return f"{backend} ({mode})" if isinstance(mode, str) and mode != "default" else backend


def backend_labels(metrics: pd.DataFrame) -> pd.Series:
    """`backend_label` of every cell."""
    return pd.Series([backend_label(b, m) for b, m in zip(metrics["backend"], metrics["compile_mode"])],
                     index=metrics.index, dtype=object)


def axis_text(value: object) -> str:
    """An axis value as text ('' for null), e.g. for labels and for telling values apart."""
    return "" if is_null(value) else str(value)


def varying_axes(frame: pd.DataFrame, axes: list[str]) -> list[str]:
    """The axes whose values (null counting as one) differ between the rows of `frame`."""
    return [axis for axis in axes if frame[axis].map(axis_text).nunique() > 1]


def axis_rows(frame: pd.DataFrame, axes: list[str]) -> list[list[object]]:
    """Each row's values of `axes`, one list per row also when `axes` is empty (where pandas 2's
    itertuples yields no rows at all)."""
    return frame[axes].to_numpy(dtype=object).tolist()


def _cell_codes(cell_ids: pd.Series, cells: pd.DataFrame) -> np.ndarray:
    """Position in `cells` of each id (-1 for ids it lacks)."""
    return pd.Categorical(cell_ids, categories=cells["cell_id"]).codes.astype(np.int64)


def representatives(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """The cell that speaks for each combination of `by` where several share one: a completed one
    first, then the one with most measured steps (other step counts of the same workload), then
    the first by id."""
    ranked = frame.assign(_done=frame["status"] == "completed", _steps=frame["measured_steps"].fillna(0))
    ranked = ranked.sort_values(["_done", "_steps", "cell_id"], ascending=[False, False, True], kind="stable")
    return ranked.drop_duplicates(by).drop(columns=["_done", "_steps"])


def _baselines(cells: pd.DataFrame) -> np.ndarray:
    """Position of each cell's eager baseline in `cells` (-1: none): the representative of the
    completed eager cells of its workload."""
    workload = cells.groupby(SAME_WORKLOAD, dropna=False, sort=False).ngroup().to_numpy()
    eager = cells[(cells["status"] == "completed") & (cells["backend"] == "eager") & cells["median_step_ms"].notna()]
    first = representatives(eager.assign(_workload=workload[eager.index]), ["_workload"])
    by_workload = np.full(workload.max() + 1 if len(workload) else 0, -1)
    by_workload[first["_workload"].to_numpy()] = first.index.to_numpy()
    return by_workload[workload]


def _step_stats(cells: pd.DataFrame, steps: pd.DataFrame, code: np.ndarray) -> SortedSamples:
    """Fill the step statistics of completed cells; returns their sorted measured step times."""
    n = len(cells)
    done = (cells["status"] == "completed").to_numpy()
    measured = (steps["phase"] == "measure").to_numpy() & (code >= 0)
    measured[measured] = done[code[measured]]
    group = code[measured]
    times = steps["step_time_ms"].to_numpy(float)[measured]
    samples = SortedSamples.from_groups(group, times, n)
    count, mean, std = group_mean_std(group, times, n)
    _, mfu_mean, mfu_std = group_mean_std(group, steps["mfu"].to_numpy(float)[measured], n)
    has = count > 0
    median = samples.quantile(0.5)
    stats = {
        "measured_steps": count, "mean_step_ms": mean, "std_step_ms": std, "median_step_ms": median,
        "p5_step_ms": samples.quantile(0.05), "p95_step_ms": samples.quantile(0.95),
        # At the median step, as the workload's own run row, so the two never disagree.
        "items_per_s": cells["items_per_step"].to_numpy(float) / (median / 1e3),
        "mfu_mean": mfu_mean, "mfu_std": mfu_std,
        "data_wait_share": group_ratio_of_sums(group, steps["data_time_ms"].to_numpy(float)[measured], times, n),
    }  # fmt: skip
    for column, values in stats.items():
        fallback = cells[RUN_SUMMARY[column]].to_numpy(float) if column in RUN_SUMMARY else np.nan
        cells[column] = np.where(done & has, values, np.where(done, fallback, np.nan))
    return samples


def _loss_max_rel_diff(cells: pd.DataFrame, steps: pd.DataFrame, code: np.ndarray, baseline: np.ndarray) -> None:
    """Largest |loss - eager loss| / |eager loss| over the steps (warm-up included) both recorded."""
    done = (cells["status"] == "completed").to_numpy()
    known = (code >= 0) & steps["loss"].notna().to_numpy()
    rows = pd.DataFrame({"cell": code[known], "step": steps["step"].to_numpy()[known],
                         "loss": steps["loss"].to_numpy(float)[known]})
    rows["base"] = baseline[rows["cell"]]
    reference = rows.loc[rows["cell"] == rows["base"], ["base", "step", "loss"]].rename(columns={"loss": "ref"})
    compared = rows[(rows["base"] >= 0) & (rows["cell"] != rows["base"]) & done[rows["cell"]]]
    joined = compared.merge(reference, on=["base", "step"])
    relative = (joined["loss"] - joined["ref"]).abs() / joined["ref"].abs()
    worst = relative.groupby(joined["cell"]).max()
    cells["loss_max_rel_diff"] = np.nan
    cells.loc[worst.index, "loss_max_rel_diff"] = worst.to_numpy()


def _comparisons(cells: pd.DataFrame, samples: SortedSamples, baseline: np.ndarray,
                 resamples: int, seed: int) -> None:
    """Speedup with its bootstrap interval and the peak-memory ratio against the eager baseline."""
    n = len(cells)
    has_base = (baseline >= 0) & (cells["status"] == "completed").to_numpy()
    base = np.where(has_base, baseline, 0)
    median = cells["median_step_ms"].to_numpy(float)
    cells["speedup"] = np.where(has_base, median[base] / median, np.nan)
    memory = cells["peak_mem_bytes"].to_numpy(float)
    cells["peak_mem_ratio"] = np.where(has_base, memory / memory[base], np.nan)
    cells["baseline_cell_id"] = np.where(has_base, cells["cell_id"].to_numpy(object)[base], None)

    low, high = np.full(n, np.nan), np.full(n, np.nan)
    itself = has_base & (base == np.arange(n))
    low[itself] = high[itself] = 1.0  # the baseline against itself: exactly 1, no spread
    boot = has_base & ~itself & (samples.count > 0) & (samples.count[base] > 0)
    if boot.any():
        involved = np.unique(np.concatenate([np.flatnonzero(boot), base[boot]]))
        subset = SortedSamples(samples.values, samples.start[involved], samples.count[involved])
        rngs = [np.random.default_rng([seed, _stable_hash(cell_id)]) for cell_id in cells["cell_id"].iloc[involved]]
        medians = subset.bootstrap_medians(resamples, rngs)
        row = np.full(n, -1)
        row[involved] = np.arange(len(involved))
        low[boot], high[boot] = percentile_interval(medians[row[base[boot]]] / medians[row[boot]])
    cells["speedup_low"], cells["speedup_high"] = low, high


def _stable_hash(text: str) -> int:
    """A 64-bit number of the text, the same in every process (unlike hash())."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")


def sort_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """Cells ordered model, architecture, size (tiny..xl), precision, eager first, backend, mode."""
    order = frame.assign(_size=frame["size"].map(SIZE_ORDER).fillna(len(SIZE_ORDER)),
                         _compiled=frame["backend"] != "eager")
    order = order.sort_values(["model", "arch", "_size", "size", "precision", "batch_size", "_compiled", "backend",
                               "compile_mode", "cell_id"], kind="stable", na_position="last")
    return frame.loc[order.index].reset_index(drop=True)


def cell_metrics(data: SweepData, resamples: int = RESAMPLES, seed: int = SEED) -> pd.DataFrame:
    """One row per cell (CELL_COLUMNS), ordered by `sort_cells`."""
    cells = data.cells.reset_index(drop=True).copy()
    if cells.empty:
        return pd.DataFrame(columns=CELL_COLUMNS)
    code = _cell_codes(data.steps["cell_id"], cells)
    samples = _step_stats(cells, data.steps, code)
    baseline = _baselines(cells)
    _comparisons(cells, samples, baseline, resamples, seed)
    _loss_max_rel_diff(cells, data.steps, code, baseline)
    cells[COUNT_COLUMNS] = cells[COUNT_COLUMNS].apply(pd.to_numeric, errors="coerce").astype("Int64")
    return sort_cells(cells[CELL_COLUMNS])
