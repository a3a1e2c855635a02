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

Compile seconds: the cold compile (`compile_cold_s`, where a run measured it with empty caches,
else the workload's `compile_time_s`, whatever the cache held) and, where a run measured it, the
warm one (`compile_warm_s`: compiled again with the caches the first left). A run row without
these columns (every sweep before cold and warm runs) reads as null there.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.reading.collect import COMPILE_COLD, COMPILE_WARM
from workloads.contract.vocabulary import BASELINE_BACKEND

#: Run columns of the cold and the warm compile time; analysis reads them where run.parquet has them.
#: The columns `break_even_columns` adds to the per-cell metrics.
BREAK_EVEN_COLUMNS = [
    "pays_off",
    "break_even_compile_s",
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


def compile_seconds(cells: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(cold, warm) compile seconds of each cell: the cold one `compile_cold_s` where recorded, else
    `compile_time_s`; the warm one `compile_warm_s` (NaN where not recorded)."""

    def recorded(name: str) -> np.ndarray:
        return (
            pd.to_numeric(cells[name], errors="coerce").to_numpy(float)
            if name in cells
            else np.full(len(cells), np.nan)
        )

    cold = recorded(COMPILE_COLD)
    return np.where(np.isnan(cold), recorded("compile_time_s"), cold), recorded(COMPILE_WARM)


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


def break_even_columns(cells: pd.DataFrame, e2e: pd.Series) -> pd.DataFrame:
    """BREAK_EVEN_COLUMNS of every cell (null for eager cells and cells without a speedup; the
    compile seconds the counts use are there for every compiled cell: `break_even_compile_s`, the cold
    one where measured): `cells` has the metrics up to the verdicts, `e2e` says which verdicts rest
    on end-to-end throughput."""
    compiled = (cells["backend"] != BASELINE_BACKEND).to_numpy() & (
        cells["baseline_cell_id"] != cells["cell_id"]
    ).to_numpy()
    speedup = np.where(e2e, cells["e2e_speedup"], cells["speedup"]).astype(float)
    speedup[~compiled] = np.nan
    eager_ms = baseline_step_ms(cells, cells, e2e)
    processes = pd.to_numeric(cells["world_size"], errors="coerce").fillna(1).to_numpy(float)
    cold, warm = compile_seconds(cells)
    columns = {
        "pays_off": pays_off(cold, eager_ms, speedup, cells.index),
        "break_even_compile_s": cold,
        "compile_warm_s": warm,
    }
    for suffix, compile_s in (("", cold), ("_warm", warm)):
        steps = steps_to_recoup(1e3 * compile_s, eager_ms, speedup)
        columns[f"break_even_steps{suffix}"] = steps
        columns[f"break_even_gpu_min{suffix}"] = steps * eager_ms / 1e3 * processes / 60
    return pd.DataFrame(columns, index=cells.index)[BREAK_EVEN_COLUMNS]
