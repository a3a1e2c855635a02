"""Energy per step of each cell, what compiling saves of it, and after how many steps compiling's
own energy is paid back.

A cell's run rows give the GPU board's energy of its measured window (NVML; summed over a DDP
cell's ranks) over the window's steps: `joules_per_step`, one value per replicate. Its J/step is
the median over its completed replicates, with the two-level bootstrap of analysis/stats.py
(replicates, then a replicate's values: here its one value), so its interval covers run-to-run
spread and needs two runs or more. A paired cell (analysis/paired.py) has its blocks' energies in
its steps: a block's J/step is its energy over its steps, and its J/step is the median over
replicates of each replicate's median compiled block, bootstrapped over replicates, then pairs.

The energy ratio is eager J/step over compiled J/step (above 1: compiling saves energy): for a
paired cell the median of its pairs' ratios (eager block over compiled block, seconds apart in one
process) with the paired speedup's bootstrap; else the eager cell's J/step over its own, with the
interval of the two cells' independent draws. Break-even in energy: the compile's energy over the
joules saved per step (analysis/breakeven.py `steps_to_recoup`), and the eager run's joules over
those steps (which the compile and the compiled steps then equal).

The tables (`energy_tables`): per cell its J/step and items/J, the energy ratio beside the time
speedup and the break-even; per compiled backend the geometric means of both ratios over the same
cells. A sweep without energy (CPU cells, sweeps before energy) has neither.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from analysis.axes import backend_labels, workload_labels
from analysis.breakeven import pays_off, steps_to_recoup
from analysis.collect import REPEAT, SweepData
from analysis.paired import PAIRED, UNPAIRED
from analysis.render import Table, fmt_break_even, fmt_interval, fmt_number, fmt_speedup
from analysis.stats import (
    ReplicateSamples,
    geometric_mean,
    percentile_interval,
    ratio_interval,
    subset_cells,
)
from workloads.contract.vocabulary import BASELINE_BACKEND, COMPLETED

#: The columns `energy_columns` gives the per-cell metrics.
ENERGY_COLUMNS = [
    "joules_per_step", "joules_per_step_low", "joules_per_step_high",
    "items_per_joule", "items_per_joule_low", "items_per_joule_high", "avg_power_w", "idle_power_w",
    "energy_ratio", "energy_ratio_low", "energy_ratio_high", "energy_method",
    "compile_energy_j", "energy_pays_off", "energy_break_even_steps", "energy_break_even_j",
]  # fmt: skip
#: The run columns of the GPU's power, the median over a cell's completed replicates in its row.
POWER = ("avg_power_w", "idle_power_w")
#: The generator streams of the draws (analysis/metrics.py's use 0-4): runs' J/step, paired blocks'
#: J/step, paired blocks' ratios.
_RUNS, _BLOCKS, _RATIOS = (5,), (6,), (7,)
#: (positions of cells, stream) -> one generator per cell, seeded by the cell's id (analysis/metrics.py).
Generators = Callable[[np.ndarray, tuple], list[np.random.Generator]]


def _by_replicate(frame: pd.DataFrame, cells: pd.DataFrame, values: np.ndarray) -> ReplicateSamples:
    """`values` (one per row of `frame`, NaN left out) by replicate of the completed cell of each row."""
    code = pd.Index(cells["cell_id"]).get_indexer(frame["cell_id"].astype(object))
    done = (cells["status"] == COMPLETED).to_numpy()
    keep = (code >= 0) & done[np.maximum(code, 0)]
    return ReplicateSamples.from_steps(
        code[keep], frame[REPEAT].to_numpy(np.int64)[keep], values[keep], len(cells)
    )


def _draws(samples: ReplicateSamples, which: np.ndarray, resamples: int, rngs: list) -> np.ndarray:
    """(len(which), resamples) two-level bootstrap draws of these cells' medians."""
    return subset_cells(samples, which).hierarchical_medians(resamples, rngs)


def _per_step(
    cells: pd.DataFrame, data: SweepData, paired: np.ndarray, resamples: int, rngs: Generators
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each cell's J/step, its draws (NaN rows without an interval), which cells have it from their
    blocks, and there the median of their pairs' energy ratios and its draws."""
    n, pairs = len(cells), data.pairs
    done = data.replicates[data.replicates["status"] == COMPLETED]
    runs = _by_replicate(done, cells, done["joules_per_step"].to_numpy(float))
    blocks = _by_replicate(pairs, cells, pairs["compiled_j_per_step"].to_numpy(float))
    eager = pairs["eager_j_per_step"].to_numpy(float)
    ratios = _by_replicate(pairs, cells, eager / pairs["compiled_j_per_step"].to_numpy(float))
    every_pair = _by_replicate(pairs, cells, np.zeros(len(pairs)))
    # Paired where every paired replicate's blocks carry energy; else the runs' values speak.
    from_blocks = paired & (ratios.replicates > 0) & (ratios.replicates == every_pair.replicates)
    value = np.where(from_blocks, blocks.medians(), runs.medians())
    draws = np.full((n, resamples), np.nan)
    ratio_draws = np.full((n, resamples), np.nan)
    which = np.flatnonzero(from_blocks)
    if len(which):
        draws[which] = _draws(blocks, which, resamples, rngs(which, _BLOCKS))
        ratio_draws[which] = _draws(ratios, which, resamples, rngs(which, _RATIOS))
    which = np.flatnonzero(~from_blocks & (runs.replicates > 1))  # one run: one value, no interval
    if len(which):
        draws[which] = _draws(runs, which, resamples, rngs(which, _RUNS))
    return value, draws, from_blocks, np.where(from_blocks, ratios.medians(), np.nan), ratio_draws


def energy_columns(
    cells: pd.DataFrame,
    data: SweepData,
    paired: np.ndarray,
    base: np.ndarray,
    resamples: int,
    rngs: Generators,
) -> pd.DataFrame:
    """ENERGY_COLUMNS of `cells` (the metrics up to the verdicts): `paired` says which cells' speedup
    is paired, `base` each cell's eager cell (position, -1 for none: itself for the eager cell)."""
    n = len(cells)
    jps, draws, from_blocks, paired_ratio, ratio_draws = _per_step(cells, data, paired, resamples, rngs)
    low, high = percentile_interval(draws)
    items = cells["items_per_step"].to_numpy(float)
    has_base = (base >= 0) & ~np.isnan(jps[np.maximum(base, 0)]) & ~np.isnan(jps)
    itself = has_base & (base == np.arange(n))
    against = has_base & ~itself & ~from_blocks
    ratio = np.where(from_blocks, paired_ratio, np.where(has_base, jps[np.maximum(base, 0)] / jps, np.nan))
    ratio_low, ratio_high = percentile_interval(ratio_draws)
    ratio_low[itself] = ratio_high[itself] = 1.0
    which = np.flatnonzero(against)
    if len(which):
        ratio_low[which], ratio_high[which] = ratio_interval(draws[base[which]], draws[which])
    done = data.replicates[data.replicates["status"] == COMPLETED]
    power = done.groupby("cell_id")[list(POWER)].median().reindex(cells["cell_id"])
    compile_j = pd.to_numeric(cells["compile_energy_j"], errors="coerce").to_numpy(float)
    compared = from_blocks | against
    eager_jps = np.where(compared, jps * ratio, np.nan)
    steps = steps_to_recoup(compile_j, eager_jps, ratio)
    columns = {
        "joules_per_step": jps, "joules_per_step_low": low, "joules_per_step_high": high,
        "items_per_joule": items / jps, "items_per_joule_low": items / high,
        "items_per_joule_high": items / low, **{name: power[name].to_numpy(float) for name in POWER},
        "energy_ratio": ratio, "energy_ratio_low": ratio_low, "energy_ratio_high": ratio_high,
        "energy_method": np.where(from_blocks, PAIRED, np.where(against, UNPAIRED, None)),
        "compile_energy_j": compile_j, "energy_pays_off": pays_off(compile_j, eager_jps, ratio, cells.index),
        "energy_break_even_steps": steps, "energy_break_even_j": steps * eager_jps,
    }  # fmt: skip
    return pd.DataFrame(columns, index=cells.index)[ENERGY_COLUMNS]


ENERGY, ENERGY_BACKENDS = "energy", "energy_backends"
SPEEDUP = ["speedup", "speedup_low", "speedup_high", "speedup_method"]
NOTE = (
    "J/step: the GPU boards' energy (NVML; all GPUs of a cell) of the measured window over its steps: "
    "idle power included, the host's CPUs and memory not. A paired cell's is of its compiled blocks (each "
    "block's energy over its steps), the median over runs of each run's median block, 95% bootstrap "
    "interval over runs, then pairs (blocks of 0.5 s and more only: with shorter ones, the default 0.1 s, "
    "a paired cell has no energy per side; measure.block_seconds=1 gives it); any other cell's is the "
    "median over runs of each run's J/step, with "
    "an interval over runs only from two runs on (one run measures one value). Items/J: items per step / "
    "J/step. Avg W: the window's mean power, median over runs; idle W: the GPU's before the cell ran. "
    "Energy ratio: eager J/step / own (above 1: compiling saves energy per step), paired (the median of "
    "the pair ratios, eager block / compiled block, as the paired speedup) or unpaired (the eager cell's "
    "J/step / own, the interval of the two cells' draws), beside the time speedup (the per-cell table's). "
    "Break-even: compile kJ (the energy of the workload's compile) / the joules saved per step, never "
    "where compiling saves none; kJ: the eager run's energy over those steps (what the compile and the "
    "compiled steps then spent too)."
)


def _break_even(rows: pd.DataFrame, column: str, scale: float, whole: bool) -> list[str]:
    return [fmt_break_even(v / scale, ok, whole) for v, ok in zip(rows[column], rows["energy_pays_off"])]


def _cells(metrics: pd.DataFrame) -> Table:
    """A row per completed cell with a J/step, in the per-cell table's order."""
    rows = metrics[(metrics["status"] == COMPLETED) & metrics["joules_per_step"].notna()]
    data = rows[["cell_id", *SPEEDUP, *ENERGY_COLUMNS]].assign(backend=backend_labels(rows))
    interval = lambda name: [fmt_interval(*v) for v in rows[[name, f"{name}_low", f"{name}_high"]].values]  # noqa: E731
    text = pd.DataFrame({
        "cell": rows["cell_id"], "workload": workload_labels(rows).str.replace("\n", " "),
        "backend": data["backend"], "J/step [95% CI]": interval("joules_per_step"),
        "items/J [95% CI]": interval("items_per_joule"),
        "avg W": rows["avg_power_w"].map(fmt_number), "idle W": rows["idle_power_w"].map(fmt_number),
        "speedup [95% CI]": [fmt_speedup(*v) for v in rows[SPEEDUP[:3]].values],
        "energy ratio [95% CI]": [fmt_speedup(*v) for v in
                                  rows[["energy_ratio", "energy_ratio_low", "energy_ratio_high"]].values],
        "vs eager": rows["energy_method"].fillna(""),
        "compile kJ": (rows["compile_energy_j"] / 1e3).map(fmt_number),
        "break-even steps": _break_even(rows, "energy_break_even_steps", 1.0, whole=True),
        "break-even kJ": _break_even(rows, "energy_break_even_j", 1e3, whole=False),
    })  # fmt: skip
    return Table(ENERGY, "Energy per step and what compiling saves of it", data, text, NOTE)


def _backends(metrics: pd.DataFrame) -> Table:
    """Per compiled backend, over its cells with an energy ratio: the geometric-mean energy ratio and
    time speedup."""
    compiled = metrics[(metrics["backend"] != BASELINE_BACKEND) & metrics["energy_ratio"].notna()]
    rows = []
    for label, cells in compiled.groupby(backend_labels(compiled), sort=True):
        energy, covered = geometric_mean(cells["energy_ratio"].to_numpy(float))
        rows.append({
            "backend": label, "cells": covered, "geomean_energy_ratio": energy,
            "geomean_speedup": geometric_mean(cells["speedup"].to_numpy(float))[0],
            "saves_energy": int((cells["energy_ratio_low"] > 1).sum()),
            "costs_energy": int((cells["energy_ratio_high"] < 1).sum()),
        })  # fmt: skip
    data = pd.DataFrame(rows, columns=["backend", "cells", "geomean_energy_ratio", "geomean_speedup",
                                       "saves_energy", "costs_energy"])  # fmt: skip
    text = pd.DataFrame({
        "backend": data["backend"], "cells": data["cells"].astype(str),
        "geomean energy ratio": data["geomean_energy_ratio"].map(fmt_speedup),
        "geomean speedup": data["geomean_speedup"].map(fmt_speedup),
        "saves energy": data["saves_energy"].astype(str), "costs energy": data["costs_energy"].astype(str),
    })  # fmt: skip
    note = (
        "Over each compiled backend's cells with an energy ratio (eager J/step / own, paired where "
        "measured): its geometric mean, and the time speedup's over the same cells. Saves energy: cells "
        "whose ratio's 95% interval lies above 1; costs energy: below 1."
    )
    return Table(ENERGY_BACKENDS, "Energy ratio over eager per backend", data, text, note)


def energy_tables(metrics: pd.DataFrame) -> list[Table]:
    """The per-cell energy table and the per-backend one; none where no cell has a J/step."""
    if not np.isfinite(metrics["joules_per_step"].to_numpy(float)).any():
        return []
    backends = _backends(metrics)
    return [_cells(metrics), *([backends] if len(backends.data) else [])]
