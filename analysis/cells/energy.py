"""Energy per step of each cell, what compiling saves of it, and after how many steps compiling's
own energy is paid back.

A cell's run rows give the GPU board's energy of its measured window (NVML; summed over a DDP
cell's ranks) over the window's steps: `joules_per_step`, one value per replicate. Its J/step is
the geometric mean over its completed replicates, with the t interval over them
(analysis/statistics/intervals.py), so its interval covers run-to-run spread and needs two runs or
more. A paired cell (analysis/cells/paired.py) has its blocks' energies in its steps: a block's J/step
is its energy over its steps, and its J/step is the geometric mean over replicates of each
replicate's median compiled block, with the t interval over replicates (one replicate: the bootstrap
of its pairs, analysis/statistics/bootstrap.py).

The energy ratio is eager J/step over compiled J/step (above 1: compiling saves energy): for a
paired cell the median of its pairs' ratios (eager block over compiled block, seconds apart in one
process) with the paired speedup's interval; else the eager cell's J/step over its own, with Welch's
interval over the two cells' runs. Break-even in energy: the compile's energy (a cold
compile's where a replicate compiled cold, else marked warm where it found an earlier compile's
cache entries: analysis/cells/breakeven.py `cold_where_measured`; `compile.measure=cold_warm`'s
cold compile, in a process of its own, has no energy reading) over the joules saved per step
(analysis/cells/breakeven.py `steps_to_recoup`), and the eager run's joules over
those steps (which the compile and the compiled steps then equal).

A J/step from a run's measured window is flagged (`energy_short_window`) where the window spans
fewer than MIN_WINDOW_UPDATES of the counter's updates (`energy_update_s`, recorded since issue 38;
ASSUMED_UPDATE_S before): each end is read up to one update stale, so over N updates the window's
energy is off by up to 1/N (the lags uniform: 1/(N·√6) sd), 10% at 10. So is an unpaired energy ratio
whose eager cell's window is short. The tables show such numbers marked and leave them out of the
per-backend means and counts. A paired cell's blocks have their own least length (the workload's
ENERGY_MIN_BLOCK_S), and its ratio an edge bias, not corrected: the time between the blocks' steps is
charged to the next block of either side, which pulls the ratio toward 1 by at most that time's share
of the compiled blocks (`energy_edge_bias`: the median over runs of `energy_edge_share`) of
(ratio - 1), where the board draws no more between blocks than in them. Idle power is flagged where
a run's board had not settled (`idle_settled`).

The tables and the figure of these columns: analysis/studies/energy/.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from analysis.cells.breakeven import cold_where_measured, pays_off, steps_to_recoup
from analysis.cells.paired import PAIRED, UNPAIRED
from analysis.reading.collect import REPEAT, SweepData
from analysis.statistics.bootstrap import (
    ReplicateSamples,
    percentile_interval,
    ratio_interval,
    subset_cells,
)
from analysis.statistics.intervals import RunLogs, t_interval, welch_interval
from workloads.contract.vocabulary import COMPLETED

#: The columns `energy_columns` gives the per-cell metrics.
ENERGY_COLUMNS = [
    "joules_per_step", "joules_per_step_low", "joules_per_step_high",
    "items_per_joule", "items_per_joule_low", "items_per_joule_high", "avg_power_w", "idle_power_w",
    "energy_ratio", "energy_ratio_low", "energy_ratio_high", "energy_method",
    "compile_energy_j", "compile_energy_warm", "energy_pays_off", "energy_break_even_steps",
    "energy_break_even_j", "energy_window_updates", "energy_short_window", "idle_settled", "energy_edge_bias",
]  # fmt: skip
#: The fewest updates of the counter a run's measured window spans for its J/step to count, and the
#: update period assumed where a run did not record one (an H100's: every 0.100 s,
#: docs/results/h100_2026-11-27_energy_counter/; the driver documents 20-100 ms).
MIN_WINDOW_UPDATES, ASSUMED_UPDATE_S = 10, 0.1
#: The run columns of the GPU's power, the median over a cell's completed replicates in its row.
POWER = ("avg_power_w", "idle_power_w")
#: The generator streams of the draws (analysis/cells/uncertainty.py's use 0-4; 5 was the runs' J/step,
#: which now has the t interval over runs): paired blocks' J/step, paired blocks' ratios.
_BLOCKS, _RATIOS = (6,), (7,)
#: (positions of cells, stream) -> one generator per cell, seeded by the cell's id
#: (analysis/cells/metrics.py).
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
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, RunLogs, RunLogs]:
    """Each cell's J/step, its draws (NaN rows without an interval), which cells have it from their
    blocks, there the centre of their pairs' energy ratios and its draws; the logs over runs of the
    J/step and of the ratios (for the intervals over runs)."""
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
    blocks_runs, runs_runs, ratio_runs = (
        RunLogs.of(s, s.replicate_medians()) for s in (blocks, runs, ratios)
    )
    logs = RunLogs(
        *(
            np.where(from_blocks, getattr(blocks_runs, f), getattr(runs_runs, f))
            for f in ("count", "mean", "sd")
        )
    )
    draws = np.full((n, resamples), np.nan)
    ratio_draws = np.full((n, resamples), np.nan)
    # Bootstrap draws only where no interval over runs can be had: a paired cell of one run (its
    # blocks and pairs). Two runs or more get the t interval (`energy_columns`); an unpaired cell of
    # one run has one value, no interval.
    which = np.flatnonzero(from_blocks & ((logs.count < 2) | (ratio_runs.count < 2)))
    if len(which):
        draws[which] = _draws(blocks, which, resamples, rngs(which, _BLOCKS))
        ratio_draws[which] = _draws(ratios, which, resamples, rngs(which, _RATIOS))
    paired_ratio = np.where(from_blocks, ratios.medians(), np.nan)
    return value, draws, from_blocks, paired_ratio, ratio_draws, logs, ratio_runs


def window_updates(window_s: pd.Series, update_s: pd.Series) -> pd.Series:
    """The counter's updates in each run's measured window: its seconds over the counter's period
    (ASSUMED_UPDATE_S where not recorded); NaN without a window."""
    period = pd.to_numeric(update_s, errors="coerce").fillna(ASSUMED_UPDATE_S)
    return pd.to_numeric(window_s, errors="coerce") / period


def _run_flags(cells: pd.DataFrame, done: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per cell, the fewest counter updates of its completed runs' windows, and whether every run's
    idle board settled (False where one did not; None where none recorded it)."""
    updates = window_updates(done["energy_window_s"], done["energy_update_s"])
    fewest = updates.groupby(done["cell_id"]).min().reindex(cells["cell_id"]).to_numpy(float, copy=True)
    settled = done["idle_settled"].astype(object)
    recorded = settled.notna().groupby(done["cell_id"]).any().reindex(cells["cell_id"], fill_value=False)
    unsettled = settled.eq(False).groupby(done["cell_id"]).any().reindex(cells["cell_id"], fill_value=False)
    flags = np.where(unsettled.to_numpy(bool), False, np.where(recorded.to_numpy(bool), True, None))
    return fewest, flags.astype(object)


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
    jps, draws, from_blocks, paired_ratio, ratio_draws, logs, ratio_logs = _per_step(
        cells, data, paired, resamples, rngs
    )
    low, high = percentile_interval(draws)
    # Two runs or more: the t interval over runs, as the speedups' (Welch's between two cells, below).
    several = logs.count >= 2
    runs_low, runs_high = t_interval(logs)
    low, high = np.where(several, runs_low, low), np.where(several, runs_high, high)
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
    over_runs = np.where(
        from_blocks & (ratio_logs.count >= 2), True, against & several & several[np.maximum(base, 0)]
    )
    runs_low, runs_high = np.where(
        from_blocks, t_interval(ratio_logs), welch_interval(logs.take(np.maximum(base, 0)), logs)
    )
    ratio_low, ratio_high = (
        np.where(over_runs, runs_low, ratio_low),
        np.where(over_runs, runs_high, ratio_high),
    )
    done = data.replicates[data.replicates["status"] == COMPLETED]
    power = done.groupby("cell_id")[list(POWER)].median().reindex(cells["cell_id"])
    edge_share = pd.to_numeric(done["energy_edge_share"], errors="coerce")
    edges = edge_share.groupby(done["cell_id"]).median().reindex(cells["cell_id"]).to_numpy(float)
    compile_j, compile_warm = cold_where_measured(cells, data.replicates, "compile_energy_j")
    fewest, settled = _run_flags(cells, done)
    fewest[from_blocks] = np.nan  # a paired cell's J/step is its blocks'
    own_short = fewest < MIN_WINDOW_UPDATES
    short = own_short | (against & own_short[np.maximum(base, 0)])
    compared = from_blocks | against
    eager_jps = np.where(compared, jps * ratio, np.nan)
    steps = steps_to_recoup(compile_j, eager_jps, ratio)
    columns = {
        "joules_per_step": jps, "joules_per_step_low": low, "joules_per_step_high": high,
        "items_per_joule": items / jps, "items_per_joule_low": items / high,
        "items_per_joule_high": items / low, **{name: power[name].to_numpy(float) for name in POWER},
        "energy_ratio": ratio, "energy_ratio_low": ratio_low, "energy_ratio_high": ratio_high,
        "energy_method": np.where(from_blocks, PAIRED, np.where(against, UNPAIRED, None)),
        "compile_energy_j": compile_j, "compile_energy_warm": compile_warm.to_numpy(object),
        "energy_pays_off": pays_off(compile_j, eager_jps, ratio, cells.index),
        "energy_break_even_steps": steps, "energy_break_even_j": steps * eager_jps,
        "energy_window_updates": fewest, "energy_short_window": short, "idle_settled": settled,
        "energy_edge_bias": np.where(from_blocks, edges, np.nan),
    }  # fmt: skip
    return pd.DataFrame(columns, index=cells.index)[ENERGY_COLUMNS]
