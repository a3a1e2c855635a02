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

Scaling is against the 1-process cell of the same workload and backend (SCALING_WORKLOAD equal,
only the processes differ): scaling speedup = own items/s / its items/s (global items: with the
per-process batch fixed, N processes train N times the items per step), with the interval of the
same bootstrap; scaling efficiency = scaling speedup / processes (1 for perfect scaling). Rank
imbalance = slowest rank's median step / fastest rank's - 1, from the run row's per-rank medians.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

from analysis.collect import NO_RESULT, UNREADABLE, SweepData
from analysis.render import is_null
from analysis.stats import SortedSamples, group_mean_std, group_ratio_of_sums, percentile_interval

#: How many processes trained a cell, and where (`batch_size` and `grad_accum` are per process).
DISTRIBUTED_AXES = ["world_size", "nodes", "dist_backend"]
#: Cells compared with each other must agree on all of these; only the backend may differ.
SAME_WORKLOAD = ["model", "arch", "size", "precision", "batch_size", "grad_accum", "data_source", "seed",
                 "device", "gpu_name", *DISTRIBUTED_AXES]
#: Cells of one scaling series agree on all of these; only the processes (and their nodes) differ.
SCALING_WORKLOAD = [*(a for a in SAME_WORKLOAD if a not in DISTRIBUTED_AXES), "backend", "compile_mode"]
#: What names a cell in tables and plots, besides its id.
AXES = ["model", "arch", "size", "backend", "compile_mode", "precision", "batch_size", "grad_accum",
        "data_source", "seed", "device", "gpu_name", *DISTRIBUTED_AXES]
METRIC_COLUMNS = [
    "status", "error", "measured_steps", "mean_step_ms", "std_step_ms", "median_step_ms", "p5_step_ms",
    "p95_step_ms", "items_per_s", "mfu_mean", "mfu_std", "speedup", "speedup_low", "speedup_high",
    "baseline_cell_id", "compile_time_s", "first_step_ms", "peak_mem_bytes", "peak_mem_ratio", "graph_count",
    "graph_break_count", "recompile_count", "loss_max_rel_diff", "data_wait_share", "items_per_step",
    "scaling_baseline_cell_id", "scaling_speedup", "scaling_speedup_low", "scaling_speedup_high",
    "scaling_efficiency", "scaling_efficiency_low", "scaling_efficiency_high", "ddp_graph_splits", "rank_imbalance",
]  # fmt: skip
CELL_COLUMNS = ["cell_id", *AXES, *METRIC_COLUMNS]
COUNT_COLUMNS = ["measured_steps", "graph_count", "graph_break_count", "recompile_count", "peak_mem_bytes",
                 "batch_size", "grad_accum", "seed", "world_size", "nodes", "items_per_step", "ddp_graph_splits"]
#: Our step statistics that the workload's run row summarises too (our name: its column): what a
#: completed cell whose steps file is missing or unreadable still has.
RUN_SUMMARY = {"measured_steps": "measured_steps", "mean_step_ms": "mean_step_ms", "std_step_ms": "std_step_ms",
               "median_step_ms": "median_step_ms", "items_per_s": "items_per_s", "mfu_mean": "mfu"}
#: How a workload setting reads in a label: `b128` for batch 128, `procs 2` for two processes;
#: precision, data source, device and the process group's backend are recognisable by their values.
SETTING_PREFIXES = {"batch_size": "b", "grad_accum": "accum ", "seed": "seed ", "world_size": "procs ",
                    "nodes": "nodes "}
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


def workload_labels(metrics: pd.DataFrame, settings: list[str] = SAME_WORKLOAD) -> pd.Series:
    """`gpt small`, `resnet small\nfp32 b128`: model (or timm arch) and size, and on a second line
    those of `settings` (workload axes) that differ between the cells with a result."""
    with_result = metrics[~metrics["status"].isin([NO_RESULT, UNREADABLE])]
    varying = varying_axes(with_result, [a for a in settings if a not in ("model", "arch", "size")])
    names = [" ".join(filter(None, (axis_text(arch if model == "timm" else model), axis_text(size))))
             for model, arch, size in zip(metrics["model"], metrics["arch"], metrics["size"])]
    lines = [" ".join(f"{SETTING_PREFIXES.get(a, '')}{axis_text(v)}" for a, v in zip(varying, values) if axis_text(v))
             for values in axis_rows(metrics, varying)]
    return pd.Series([f"{n}\n{s}" if s else n for n, s in zip(names, lines)], index=metrics.index)


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


def _references(cells: pd.DataFrame, by: list[str], candidates: pd.Series) -> np.ndarray:
    """Position in `cells` of each cell's reference (-1: none): the representative of the completed
    `candidates` (a mask) with a median step among the cells that agree with it on `by`."""
    workload = cells.groupby(by, dropna=False, sort=False).ngroup().to_numpy()
    chosen = cells[candidates & (cells["status"] == "completed") & cells["median_step_ms"].notna()]
    first = representatives(chosen.assign(_workload=workload[chosen.index]), ["_workload"])
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


def _against(cells: pd.DataFrame, reference: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(whether a completed cell has a reference, the reference's position or 0 where it has none)."""
    has = (reference >= 0) & (cells["status"] == "completed").to_numpy()
    return has, np.where(has, reference, 0)


def _comparisons(cells: pd.DataFrame, samples: SortedSamples, baseline: np.ndarray,
                 resamples: int, seed: int) -> None:
    """Speedup with its bootstrap interval and the peak-memory ratio against the eager baseline."""
    has_base, base = _against(cells, baseline)
    median = cells["median_step_ms"].to_numpy(float)
    cells["speedup"] = np.where(has_base, median[base] / median, np.nan)
    cells["speedup_low"], cells["speedup_high"] = _median_ratio_interval(cells, samples, base, has_base,
                                                                         resamples, seed)
    memory = cells["peak_mem_bytes"].to_numpy(float)
    cells["peak_mem_ratio"] = np.where(has_base, memory / memory[base], np.nan)
    cells["baseline_cell_id"] = np.where(has_base, cells["cell_id"].to_numpy(object)[base], None)


def _scaling(cells: pd.DataFrame, samples: SortedSamples, resamples: int, seed: int) -> None:
    """Scaling speedup and efficiency against the 1-process cell, with bootstrap intervals."""
    one_process = _references(cells, SCALING_WORKLOAD, cells["world_size"] == 1)
    has_base, base = _against(cells, one_process)
    throughput = cells["items_per_s"].to_numpy(float)
    # Throughput ratio = ratio of global items per step x ratio of median steps (the bootstrapped part).
    items = cells["items_per_step"].to_numpy(float)
    low, high = _median_ratio_interval(cells, samples, base, has_base, resamples, seed)
    speedup = {"": np.where(has_base, throughput / throughput[base], np.nan),
               "_low": low * items / items[base], "_high": high * items / items[base]}
    for suffix, values in speedup.items():
        cells[f"scaling_speedup{suffix}"] = values
        cells[f"scaling_efficiency{suffix}"] = values / cells["world_size"].to_numpy(float)  # the reference: 1
    cells["scaling_baseline_cell_id"] = np.where(has_base, cells["cell_id"].to_numpy(object)[base], None)


def _median_ratio_interval(cells: pd.DataFrame, samples: SortedSamples, base: np.ndarray, has_base: np.ndarray,
                           resamples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """95% bootstrap interval of (median step of the cell at `base`) / (own median step) for each
    cell where `has_base`: exactly 1 against itself, NaN where either cell has no steps."""
    n = len(cells)
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
    return low, high


def _rank_imbalance(cells: pd.DataFrame) -> np.ndarray:
    """Slowest rank's median step / fastest rank's - 1 of each completed cell with two ranks or more."""
    imbalance = np.full(len(cells), np.nan)
    for i, (status, medians) in enumerate(zip(cells["status"], cells["rank_median_step_ms"])):
        known = np.asarray(medians if isinstance(medians, (list, np.ndarray)) else [], dtype=float)
        known = known[~np.isnan(known)]
        if status == "completed" and len(known) > 1:
            imbalance[i] = known.max() / known.min() - 1
    return imbalance


def _stable_hash(text: str) -> int:
    """A 64-bit number of the text, the same in every process (unlike hash())."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")


def sort_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """Cells ordered model, architecture, size (tiny..xl), precision, batch, processes, eager first,
    backend, mode."""
    order = frame.assign(_size=frame["size"].map(SIZE_ORDER).fillna(len(SIZE_ORDER)),
                         _compiled=frame["backend"] != "eager")
    order = order.sort_values(["model", "arch", "_size", "size", "precision", "batch_size", "world_size", "nodes",
                               "_compiled", "backend", "compile_mode", "cell_id"], kind="stable", na_position="last")
    return frame.loc[order.index].reset_index(drop=True)


def cell_metrics(data: SweepData, resamples: int = RESAMPLES, seed: int = SEED) -> pd.DataFrame:
    """One row per cell (CELL_COLUMNS), ordered by `sort_cells`."""
    cells = data.cells.reset_index(drop=True).copy()
    if cells.empty:
        return pd.DataFrame(columns=CELL_COLUMNS)
    code = _cell_codes(data.steps["cell_id"], cells)
    samples = _step_stats(cells, data.steps, code)
    baseline = _references(cells, SAME_WORKLOAD, cells["backend"] == "eager")
    _comparisons(cells, samples, baseline, resamples, seed)
    _loss_max_rel_diff(cells, data.steps, code, baseline)
    _scaling(cells, samples, resamples, seed)
    cells["rank_imbalance"] = _rank_imbalance(cells)
    cells[COUNT_COLUMNS] = cells[COUNT_COLUMNS].apply(pd.to_numeric, errors="coerce").astype("Int64")
    return sort_cells(cells[CELL_COLUMNS])
