"""Per-cell metrics of a sweep: one row per cell, numbers over the measured steps of the attempts that
count (warm-up and compilation never enter them), replicates as one cell, speedups against the eager
cell of the same workload with their intervals (over runs, or within one process: analysis/cells/
uncertainty.py; a paired cell's against its own eager side: analysis/cells/paired.py), verdicts,
scaling against the 1-process cell. The method, column by
column, is in docs/analysis.md ("The tables"); which cells are compared with which, and how they are
named, is analysis/reading/axes.py's.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from analysis.cells.breakeven import BREAK_EVEN_COLUMNS, break_even_columns
from analysis.cells.cost import COST_COLUMNS, cost_columns
from analysis.cells.device_time import DEVICE_COLUMNS, LAUNCH_BOUND, device_columns
from analysis.cells.energy import ENERGY_COLUMNS, energy_columns
from analysis.cells.paired import PAIRED_COLUMNS, pair_ratios, paired_cells, use_paired
from analysis.cells.uncertainty import (
    PAIRED_STREAM,
    RESAMPLES,
    SEED,
    UNSTABLE_TOLERANCE,
    Draws,
    across_runs,
    apart_notes,
    baseline_limits,
    cell_codes,
    draws_ratio_interval,
    generators,
    interval_levels,
    interval_texts,
    stability,
)
from analysis.reading.axes import SAME_WORKLOAD, SCALING_WORKLOAD, reference_positions, sort_cells
from analysis.reading.collect import REPEAT, SweepData
from analysis.statistics.bootstrap import (
    ReplicateSamples,
    SortedSamples,
    centre_over_replicates,
    group_mean_std,
    group_moments,
    group_ratio_of_sums,
)
from analysis.statistics.verdicts import DATA_BOUND, E2E_BASIS, EQUIVALENCE, verdicts
from workloads.contract.vocabulary import (
    ACCURACY_ERROR,
    ACCURACY_FAIL,
    ACCURACY_PASS,
    BASELINE_BACKEND,
    COMPLETED,
    names,
)

#: The accuracy check's result, its worst quantity's error and eager's own, the quantity, its limit and
#: its measure (null in sweeps before the per-tensor check; the measure before issue 50), as
#: `fmt_accuracy` takes them.
ACCURACY_COLUMNS = (
    "accuracy", "accuracy_rel_diff", "accuracy_noise_floor", "accuracy_worst_tensor", "accuracy_tolerance",
    "accuracy_measure",
)  # fmt: skip
#: What names a cell in tables and plots, besides its id: every axis.
AXES = names()
METRIC_COLUMNS = [
    "status", "error", "replicates", "measured_steps", "mean_step_ms", "std_step_ms", "median_step_ms",
    "p5_step_ms", "p95_step_ms", "replicate_spread", "unstable", "runs_apart", "items_per_s",
    "e2e_items_per_s", "mfu_mean",
    "mfu_std", "e2e_mfu", "speedup", "speedup_low", "speedup_high", "interval", "interval_level",
    *PAIRED_COLUMNS, "e2e_speedup", "e2e_speedup_low", "e2e_speedup_high", "data_bound", *DEVICE_COLUMNS,
    "verdict", "verdict_basis",
    "baseline_cell_id", "compile_time_s", "compile_cache_hits", *BREAK_EVEN_COLUMNS, "first_step_ms",
    "peak_mem_bytes", "peak_mem_ratio",
    "graph_count", "graph_break_count", "recompile_count",
    *ACCURACY_COLUMNS, "data_wait_share", "items_per_step",
    "scaling_baseline_cell_id", "scaling_speedup", "scaling_speedup_low", "scaling_speedup_high",
    "scaling_efficiency", "scaling_efficiency_low", "scaling_efficiency_high", "ddp_graph_splits",
    "rank_imbalance", *ENERGY_COLUMNS, *COST_COLUMNS,
]  # fmt: skip
CELL_COLUMNS = ["cell_id", *AXES, *METRIC_COLUMNS]
COUNT_COLUMNS = [
    "replicates", "measured_steps", "pairs", "compile_cache_hits", "graph_count", "graph_break_count",
    "recompile_count", "peak_mem_bytes", "batch_size", "grad_accum", "seed", "world_size", "nodes",
    "items_per_step", "ddp_graph_splits",
]  # fmt: skip
#: Our step statistics that the workload's run row summarises too (our name: its column): what a
#: completed cell whose steps file is missing or unreadable still has.
RUN_SUMMARY = {
    "measured_steps": "measured_steps",
    "mean_step_ms": "mean_step_ms",
    "std_step_ms": "std_step_ms",
    "median_step_ms": "median_step_ms",
    "items_per_s": "items_per_s",
    "mfu_mean": "mfu",
    "e2e_items_per_s": "e2e_items_per_s",
    "e2e_mfu": "e2e_mfu",
}


def _pooled(replicas: ReplicateSamples, group: np.ndarray, times: np.ndarray, n: int) -> SortedSamples:
    """Every cell's steps of all its replicates, sorted (for the percentiles). Where no cell has
    more than one replicate these are the replicates' own sorted steps: a second sort of a million
    steps is saved."""
    if len(replicas.steps.count) and (replicas.replicates <= 1).all():
        rows = np.minimum(replicas.first, len(replicas.steps.count) - 1)
        count = np.where(replicas.replicates > 0, replicas.steps.count[rows], 0)
        return SortedSamples(replicas.steps.values, replicas.steps.start[rows], count)
    return SortedSamples.from_groups(group, times, n)


def _step_stats(cells: pd.DataFrame, steps: pd.DataFrame, code: np.ndarray) -> ReplicateSamples:
    """Fill the step statistics of completed cells; returns their measured step times by replicate."""
    n = len(cells)
    done = (cells["status"] == COMPLETED).to_numpy()
    measured = (steps["phase"] == "measure").to_numpy() & (code >= 0)
    measured[measured] = done[code[measured]]
    group = code[measured]
    times = steps["step_time_ms"].to_numpy(float)[measured]
    replicas = ReplicateSamples.from_steps(group, steps[REPEAT].to_numpy(np.int64)[measured], times, n)
    samples = _pooled(replicas, group, times, n)
    count, mean, std = group_mean_std(group, times, n)
    mfu = steps["mfu"].to_numpy(float)[measured]
    _, mfu_mean, mfu_std = group_mean_std(group, mfu, n)
    # MFU x step time is FLOPs per step / peak, the same for every step of a cell: over the span,
    # MFU is that / the mean step, as end-to-end items/s is items per step / the mean step.
    _, flops_over_peak, _ = group_mean_std(group, mfu * times, n)
    replicate_mean, _ = group_moments(replicas.steps)
    steps_per_ms = centre_over_replicates(replicas, 1 / replicate_mean)
    items = cells["items_per_step"].to_numpy(float)
    has = count > 0
    median = replicas.medians()
    stats = {
        "measured_steps": count, "mean_step_ms": mean, "std_step_ms": std, "median_step_ms": median,
        "p5_step_ms": samples.quantile(0.05), "p95_step_ms": samples.quantile(0.95),
        # At the median step, as the workload's own run row, so the two never disagree.
        "items_per_s": items / (median / 1e3),
        "e2e_items_per_s": items * steps_per_ms * 1e3,
        "mfu_mean": mfu_mean, "mfu_std": mfu_std, "e2e_mfu": flops_over_peak * steps_per_ms,
        "data_wait_share": group_ratio_of_sums(
            group, steps["data_time_ms"].to_numpy(float)[measured], times, n
        ),
    }  # fmt: skip
    for column, values in stats.items():
        fallback = cells[RUN_SUMMARY[column]].to_numpy(float) if column in RUN_SUMMARY else np.nan
        cells[column] = np.where(done & has, values, np.where(done, fallback, np.nan))
    counted = (
        pd.to_numeric(cells["replicates"], errors="coerce").to_numpy(float)
        if "replicates" in cells
        else np.ones(n)
    )
    cells["replicates"] = np.where(done & has, replicas.replicates, np.where(done, np.fmax(counted, 1), 0))
    return replicas


#: How the accuracy checks of a cell's replicates combine: the worst speaks for the cell.
_ACCURACY_ORDER = {ACCURACY_PASS: 0, ACCURACY_ERROR: 1, ACCURACY_FAIL: 2}


def _accuracy(cells: pd.DataFrame, replicates: pd.DataFrame) -> None:
    """The accuracy check (workloads/instruments/accuracy.py) of each cell's completed replicates: the
    worst result (fail_accuracy, then error, then pass) with its differences; null where unchecked."""
    checked = replicates[(replicates["status"] == COMPLETED) & replicates["accuracy"].notna()]
    ranked = checked.assign(rank=checked["accuracy"].map(_ACCURACY_ORDER))
    worst = ranked.sort_values(["rank", "accuracy_rel_diff"]).groupby("cell_id").tail(1).set_index("cell_id")
    for column in ACCURACY_COLUMNS:
        cells[column] = cells["cell_id"].map(worst[column])


def _against(cells: pd.DataFrame, reference: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(whether a completed cell has a reference, the reference's position or 0 where it has none)."""
    has = (reference >= 0) & (cells["status"] == COMPLETED).to_numpy()
    return has, np.where(has, reference, 0)


def _memory_ratio(cells: pd.DataFrame, has_base: np.ndarray, base: np.ndarray) -> np.ndarray:
    """Peak memory / eager's: a paired cell's own eager side's where it has one, else the eager
    cell's. A paired cell without one (the CPU, sweeps before issue 38) has its process's peak,
    both sides': no ratio."""
    memory = cells["peak_mem_bytes"].to_numpy(float)
    own_eager = cells["eager_peak_mem_bytes"].to_numpy(float)
    done, paired = (cells["status"] == COMPLETED).to_numpy(), cells["paired"].eq(True).to_numpy()
    against_cell = np.where(has_base & ~paired, memory / memory[base], np.nan)
    return np.where(done & ~np.isnan(own_eager), memory / own_eager, against_cell)


def _comparisons(cells: pd.DataFrame, draws: Draws, baseline: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """Speedups (median step, end-to-end) with their bootstrap intervals and the peak-memory ratio
    against the eager baseline (its first `limit` runs: `baseline_limits`); returns each cell's
    baseline position (-1: none)."""
    has_base, base = _against(cells, baseline)
    median = cells["median_step_ms"].to_numpy(float)
    cells["speedup"] = np.where(has_base, median[base] / median, np.nan)
    cells["speedup_low"], cells["speedup_high"] = draws_ratio_interval(
        draws, "median", base, has_base, limit=limit
    )
    # End-to-end: own items/s over the baseline's; the draws are of steps per ms, times items per step.
    e2e, items = cells["e2e_items_per_s"].to_numpy(float), cells["items_per_step"].to_numpy(float)
    cells["e2e_speedup"] = np.where(has_base, e2e / e2e[base], np.nan)
    low, high = draws_ratio_interval(draws, "rate", base, has_base, invert=False, limit=limit)
    scale = np.where(base == np.arange(len(base)), 1.0, items / items[base])
    cells["e2e_speedup_low"], cells["e2e_speedup_high"] = low * scale, high * scale
    cells["peak_mem_ratio"] = _memory_ratio(cells, has_base, base)
    cells["baseline_cell_id"] = np.where(has_base, cells["cell_id"].to_numpy(object)[base], None)
    return np.where(has_base, base, -1)


def _scaling(cells: pd.DataFrame, draws: Draws) -> None:
    """Scaling speedup and efficiency against the 1-process cell, with bootstrap intervals."""
    one_process = reference_positions(cells, SCALING_WORKLOAD, cells["world_size"] == 1)
    has_base, base = _against(cells, one_process)
    throughput = cells["items_per_s"].to_numpy(float)
    # Throughput ratio = ratio of global items per step x ratio of median steps (the bootstrapped part).
    items = cells["items_per_step"].to_numpy(float)
    low, high = draws_ratio_interval(draws, "median", base, has_base)
    speedup = {
        "": np.where(has_base, throughput / throughput[base], np.nan),
        "_low": low * items / items[base],
        "_high": high * items / items[base],
    }
    for suffix, values in speedup.items():
        cells[f"scaling_speedup{suffix}"] = values
        cells[f"scaling_efficiency{suffix}"] = values / cells["world_size"].to_numpy(
            float
        )  # the reference: 1
    cells["scaling_baseline_cell_id"] = np.where(has_base, cells["cell_id"].to_numpy(object)[base], None)


def _rank_imbalance(cells: pd.DataFrame) -> np.ndarray:
    """Slowest rank's median step / fastest rank's - 1 of each completed cell with two ranks or more."""
    imbalance = np.full(len(cells), np.nan)
    for i, (status, medians) in enumerate(zip(cells["status"], cells["rank_median_step_ms"])):
        known = np.asarray(medians if isinstance(medians, (list, np.ndarray)) else [], dtype=float)
        known = known[~np.isnan(known)]
        if status == COMPLETED and len(known) > 1:
            imbalance[i] = known.max() / known.min() - 1
    return imbalance


def cell_metrics(
    data: SweepData,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    equivalence: float = EQUIVALENCE,
    data_bound: float = DATA_BOUND,
    launch_bound: float = LAUNCH_BOUND,
    auto_max_repeats: Mapping[str, int] | None = None,
    stopped_against: Mapping[str, int] | None = None,
) -> pd.DataFrame:
    """One row per cell (CELL_COLUMNS), ordered by `sort_cells`. `equivalence`: the margin of practical
    equivalence of the verdicts, also the tolerance of `unstable` where above UNSTABLE_TOLERANCE;
    `data_bound`: the data-wait share above which a cell is data-bound; `launch_bound`: the share of a
    side's measured step the GPU idles above which it is launch-bound (analysis/cells/device_time.py);
    `auto_max_repeats`: the cells run with repeats=auto, their max_repeats by id (analysis/cells/
    loaded.py `auto_settings`); `stopped_against`: a stopped repeats=auto cell's eager cell's runs when
    it stopped, by id (its stop record's `against`): its speedup is judged on those."""
    if not 0 <= equivalence < 1 or not 0 <= data_bound <= 1 or not 0 <= launch_bound <= 1:
        raise ValueError(
            f"equivalence must lie in [0, 1), data_bound and launch_bound in [0, 1], not {equivalence}, "
            f"{data_bound} and {launch_bound}"
        )
    cells = data.cells.reset_index(drop=True).copy()
    if cells.empty:
        return pd.DataFrame(columns=CELL_COLUMNS)
    code = cell_codes(data.steps["cell_id"], cells)
    replicas = _step_stats(cells, data.steps, code)
    ratios = pair_ratios(cells, data.pairs)
    paired = paired_cells(ratios, replicas)
    tolerance = max(equivalence, UNSTABLE_TOLERANCE)
    stability(cells, replicas, ratios, paired, resamples, seed, tolerance)
    level = interval_levels(cells, replicas.replicates, auto_max_repeats)
    draws = Draws(cells, replicas, resamples, seed, level)
    baseline = reference_positions(cells, SAME_WORKLOAD, cells["backend"] == BASELINE_BACKEND)
    limit = baseline_limits(cells, stopped_against)
    base = _comparisons(cells, draws, baseline, limit)
    compared = ((base >= 0) & (base != np.arange(len(cells)))) | paired
    rngs = generators(cells, np.flatnonzero(paired), seed, PAIRED_STREAM)
    use_paired(cells, ratios, paired, compared, resamples, rngs, level, tolerance)
    counts = replicas.replicates
    across = np.where(paired, counts >= 2, compared & across_runs(counts, counts[np.maximum(base, 0)]))
    cells["interval"] = interval_texts(replicas.replicates, across, compared)
    cells["interval_level"] = np.where(compared, level, np.nan)
    cells["runs_apart"] = apart_notes(replicas, ratios, paired, compared, base, limit)
    verdicts(cells, compared, base, data_bound, equivalence)
    device = device_columns(cells, data, paired, base, level, launch_bound)
    # Joined and consolidated: a column inserted at a time, the frame passes pandas' 100 blocks (it warns).
    cells = pd.concat([cells.drop(columns=cells.columns.intersection(DEVICE_COLUMNS)), device], axis=1).copy()
    cells[BREAK_EVEN_COLUMNS] = break_even_columns(
        cells, cells["verdict_basis"] == E2E_BASIS, data.replicates
    )
    energy_rngs = lambda which, stream: generators(cells, which, seed, stream)  # noqa: E731
    cells[ENERGY_COLUMNS] = energy_columns(cells, data, paired, base, resamples, energy_rngs)
    cells[COST_COLUMNS] = cost_columns(cells, data.attempts)
    _accuracy(cells, data.replicates)
    _scaling(cells, draws)
    cells["rank_imbalance"] = _rank_imbalance(cells)
    # Graphs the compile found in the cache (FX graph or AOTAutograd): its compile time was not a cold one.
    cells["compile_cache_hits"] = cells[["fx_graph_cache_hits", "aot_autograd_cache_hits"]].sum(
        axis=1, min_count=1
    )
    cells[COUNT_COLUMNS] = cells[COUNT_COLUMNS].apply(pd.to_numeric, errors="coerce").astype("Int64")
    return sort_cells(cells[CELL_COLUMNS])
