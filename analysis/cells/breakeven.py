"""After how many steps compiling pays for itself: the break-even of each compiled cell.

A compiled cell against the eager cell of the same workload (its `baseline_cell_id`) costs its
compile time once and saves (eager step - compiled step) per step, so it breaks even after

    steps     = compile seconds / (eager step - compiled step)
    GPU-min   = steps x eager step x processes / 60   (eager's time for those steps, on every GPU;
                                                       the compiled run's compile + steps is as long)

and never where the compiled step is not faster: then `pays_off` is false and the counts null (as
they are where a cell has no speedup or compile time; `pays_off` is null there). The steps are those
the verdict rests on (analysis.cells.metrics): median steps, or mean steps where the speedup is end to end
(data-bound cells), so the compiled step is the eager step / that speedup. A paired cell's speedup
is its own eager side's over its compiled steps (analysis/cells/paired.py), so its eager step is its own
median step x that speedup: the compiled step is the cell's own, and the eager cell, measured in
another process on a host of another speed, does not enter.

Compile seconds: the cold compile where one was measured, and whether the one the counts use was
warm (`break_even_compile_warm`). Cold: `compile_cold_s` (`compile.measure=cold_warm`: empty
caches, a process of its own), else the median `compile_time_s` of the cell's replicates whose
compile hit no entry of FX graph or AOTAutograd cache (`compile_warmth`); else the cell's own
`compile_time_s`, marked warm where it hit one: a later replicate, or a later cell of a packed
task or of a sweep sharing `cluster.compile_cache` (packed deit_small broke even after 511 steps
against 3,762 unpacked, issue 38). Beside it, where a run measured it, the warm compile
(`compile_warm_s`: compiled again with the caches the first left). A run row without these columns
(sweeps before cold and warm runs or the cache counters) reads as null there.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.reading.collect import COMPILE_COLD, COMPILE_WARM
from workloads.contract.vocabulary import BASELINE_BACKEND, COMPLETED

#: A run row's lookups of the FX graph and AOTAutograd caches that found an earlier compile's entry.
CACHE_HITS = ("fx_graph_cache_hits", "aot_autograd_cache_hits")
#: The columns `break_even_columns` adds to the per-cell metrics.
BREAK_EVEN_COLUMNS = [
    "pays_off",
    "break_even_compile_s",
    "break_even_compile_warm",
    "compile_warm_s",
    "break_even_steps",
    "break_even_gpu_min",
    "break_even_steps_warm",
    "break_even_gpu_min_warm",
]


def baseline_step_ms(metrics: pd.DataFrame, cells: pd.DataFrame, e2e: pd.Series) -> np.ndarray:
    """The eager step each of `cells` (rows of `metrics`) has its speedup over: its baseline's median
    step, or mean step where the speedup is end to end (`e2e`, per row of `cells`), or where the
    speedup is paired (it rests on `pairs`) its own median step x that speedup; NaN without one."""
    baseline = metrics.drop_duplicates("cell_id").set_index("cell_id")
    median = cells["baseline_cell_id"].map(baseline["median_step_ms"]).to_numpy(float)
    mean = cells["baseline_cell_id"].map(baseline["mean_step_ms"]).to_numpy(float)
    own = cells["median_step_ms"].to_numpy(float) * cells["speedup"].to_numpy(float)
    paired = cells["pairs"].notna().to_numpy()
    return np.where(e2e.to_numpy(bool), mean, np.where(paired, own, median))


def _recorded(rows: pd.DataFrame, name: str) -> np.ndarray:
    return (
        pd.to_numeric(rows[name], errors="coerce").to_numpy(float)
        if name in rows
        else np.full(len(rows), np.nan)
    )


def compile_warmth(rows: pd.DataFrame) -> pd.Series:
    """Per run row, whether its compile was warm: True where it hit a cache entry an earlier compile
    wrote (CACHE_HITS), False where it hit none, null where unrecorded (no dynamo, older sweeps).
    Kernels found in triton's cache alone count no hit: such a compile reads as cold."""
    hits = pd.DataFrame({name: _recorded(rows, name) for name in CACHE_HITS}, index=rows.index)
    return (hits.sum(axis=1) > 0).astype(object).where(hits.notna().any(axis=1), None)


def cold_where_measured(
    cells: pd.DataFrame, replicates: pd.DataFrame, column: str
) -> tuple[np.ndarray, pd.Series]:
    """Per cell, run column `column` of a cold compile where one was measured: the median over its
    completed replicates whose compile hit no cache entry; else the cell's own (its counting
    attempt's). And whether that value is of a warm compile (`compile_warmth`; False for the cold
    replicates' median)."""
    done = replicates[replicates["status"] == COMPLETED]
    cold = done[compile_warmth(done).eq(False).to_numpy(bool)]
    median = pd.to_numeric(cold[column], errors="coerce").groupby(cold["cell_id"]).median()
    values = cells["cell_id"].map(median).to_numpy(float)
    has_cold = ~np.isnan(values)
    warm = compile_warmth(cells).where(~has_cold, False)
    return np.where(has_cold, values, _recorded(cells, column)), warm


def compile_seconds(
    cells: pd.DataFrame, replicates: pd.DataFrame
) -> tuple[np.ndarray, pd.Series, np.ndarray]:
    """(cold, whether that one was warm, warm) compile seconds of each cell: `compile_cold_s` where
    recorded, else `cold_where_measured`'s `compile_time_s`; the warm one `compile_warm_s` (NaN where
    not recorded)."""
    measured = _recorded(cells, COMPILE_COLD)
    seconds, warm = cold_where_measured(cells, replicates, "compile_time_s")
    cold = ~np.isnan(measured)
    return np.where(cold, measured, seconds), warm.where(~cold, False), _recorded(cells, COMPILE_WARM)


def steps_to_recoup(once: np.ndarray, eager: np.ndarray, ratio: np.ndarray) -> np.ndarray:
    """Steps after which a one-off cost `once` is saved back, saving eager - eager / ratio per step
    (`eager`: eager's cost per step in `once`'s unit, `ratio`: eager's / compiled's); NaN where
    compiling saves nothing or it is unknown."""
    saved = eager * (1 - 1 / ratio)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(saved > 0, once / saved, np.nan)


def pays_off(once: np.ndarray, eager: np.ndarray, ratio: np.ndarray, index: pd.Index) -> pd.Series:
    """Whether compiling is ever recouped (`steps_to_recoup`'s arguments): true where it saves per
    step, false where it does not (never), null where any of them is unknown."""
    return pd.Series(ratio > 1, index=index, dtype=object).where(~np.isnan(ratio * eager * once))


def break_even_columns(cells: pd.DataFrame, e2e: pd.Series, replicates: pd.DataFrame) -> pd.DataFrame:
    """BREAK_EVEN_COLUMNS of every cell (null for eager cells and cells without a speedup; the
    compile seconds the counts use are there for every compiled cell: `break_even_compile_s`, the cold
    one where measured, and `break_even_compile_warm`): `cells` has the metrics up to the verdicts,
    `e2e` says which verdicts rest on end-to-end throughput, `replicates` the run rows of the cells'
    replicates (SweepData.replicates)."""
    compiled = (cells["backend"] != BASELINE_BACKEND).to_numpy() & (
        cells["baseline_cell_id"] != cells["cell_id"]
    ).to_numpy()
    speedup = np.where(e2e, cells["e2e_speedup"], cells["speedup"]).astype(float)
    speedup[~compiled] = np.nan
    eager_ms = baseline_step_ms(cells, cells, e2e)
    processes = pd.to_numeric(cells["world_size"], errors="coerce").fillna(1).to_numpy(float)
    cold, cold_was_warm, warm = compile_seconds(cells, replicates)
    columns = {
        "pays_off": pays_off(cold, eager_ms, speedup, cells.index),
        "break_even_compile_s": cold,
        "break_even_compile_warm": cold_was_warm.to_numpy(object),
        "compile_warm_s": warm,
    }
    for suffix, compile_s in (("", cold), ("_warm", warm)):
        steps = steps_to_recoup(1e3 * compile_s, eager_ms, speedup)
        columns[f"break_even_steps{suffix}"] = steps
        columns[f"break_even_gpu_min{suffix}"] = steps * eager_ms / 1e3 * processes / 60
    return pd.DataFrame(columns, index=cells.index)[BREAK_EVEN_COLUMNS]
