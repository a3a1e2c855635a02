"""What a cell's intervals rest on, and how they are drawn: over runs (the t and Welch intervals of
analysis/statistics/intervals.py) where a cell, or both cells of a ratio, ran 2 replicates or more,
else the bootstrap of one run's steps (analysis/statistics/bootstrap.py), labelled within one process;
each cell's generators seeded by its id, so a cell gets the same interval alone or in any sweep; the
level (95%, or repeats=auto's spent level); and whether a cell's runs disagree (`unstable`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from analysis.reading.collect import REPEAT
from analysis.statistics.apart import apart_note, runs_apart
from analysis.statistics.bootstrap import (
    ReplicateSamples,
    group_moments,
    hierarchical_means,
    percentile_interval,
    ratio_interval,
    stable_hash,
    subset_cells,
)
from analysis.statistics.decision import spent_level
from analysis.statistics.intervals import RunLogs, t_interval, welch_interval
from workloads.contract.vocabulary import COMPLETED

#: What an interval within one run is labelled: it cannot see how runs differ.
WITHIN_ONE_PROCESS = "within one process"
#: Bootstrap resamples of each cell's measured steps, and the seed that, with the cell's id, seeds
#: its generators: a cell gets the same interval in every analysis, alone or in any sweep.
RESAMPLES, SEED = 1000, 0
#: The generators of one cell: the median's draws (speedup and scaling intervals; as before
#: replicates, so single-run intervals are unchanged), the replicates' own intervals (`unstable`),
#: the mean's draws (end-to-end intervals), the pair ratios' draws (the paired speedup) and the
#: replicates' own intervals of those, each its own stream.
MEDIAN_STREAM, UNSTABLE_STREAM, MEAN_STREAM, PAIRED_STREAM, PAIRED_UNSTABLE_STREAM = (
    (),
    (1,),
    (2,),
    (3,),
    (4,),
)
#: The least gap between replicates' intervals, relative, that makes a cell `unstable` (or the
#: equivalence margin, if larger). With thousands of steps a replicate's own interval is ~0.1%
#: wide: on the H100 every cell's processes differed by more than that (docs/gpu-results.md), which
#: is what replicates are for; `unstable` is for disagreements that could change a verdict.
UNSTABLE_TOLERANCE = 0.01


def cell_codes(cell_ids: pd.Series, cells: pd.DataFrame) -> np.ndarray:
    """Position in `cells` of each id (-1 for ids it lacks)."""
    return pd.Index(cells["cell_id"]).get_indexer(cell_ids.astype(object)).astype(np.int64)


def generators(
    cells: pd.DataFrame, which: np.ndarray, seed: int, stream: tuple = MEDIAN_STREAM
) -> list[np.random.Generator]:
    """The generators of these cells (positions) for one purpose, seeded by the seed and the cell's id."""
    return [
        np.random.default_rng([seed, stable_hash(cell_id), *stream])
        for cell_id in cells["cell_id"].iloc[which]
    ]


def stability(
    cells: pd.DataFrame,
    replicas: ReplicateSamples,
    ratios: ReplicateSamples,
    paired: np.ndarray,
    resamples: int,
    seed: int,
    tolerance: float,
) -> None:
    """`replicate_spread` and `unstable` of the cells with two replicates or more: of their median
    steps, or where paired of their median pair ratios. A paired cell's answer is the ratio, and a
    host whose speed moves between processes, which moves the steps, is what pairing cancels."""
    spread, unstable = np.full(len(cells), np.nan), np.zeros(len(cells), bool)
    for samples, which, stream in (
        (replicas, ~paired, UNSTABLE_STREAM),
        (ratios, paired, PAIRED_UNSTABLE_STREAM),
    ):
        several = np.flatnonzero(which & (samples.replicates > 1))
        if len(several):
            sub = subset_cells(samples, several)
            unstable[several], spread[several] = sub.unstable(
                resamples, generators(cells, several, seed, stream), tolerance=tolerance
            )
    cells["replicate_spread"], cells["unstable"] = spread, unstable


def apart_notes(
    replicas: ReplicateSamples,
    ratios: ReplicateSamples,
    paired: np.ndarray,
    compared: np.ndarray,
    base: np.ndarray,
    limit: np.ndarray,
) -> np.ndarray:
    """Per compared cell, the run its interval rests on that stands apart (analysis/statistics/apart.py),
    as a note (`run 5 is 12% above the others`), else None: of a paired cell's runs' median ratios; of
    an unpaired cell's runs' median steps, then of its eager cell's (its first `limit` runs,
    `first_runs`). The host probe of each run, once recorded, is what `apart_note`'s `why` is for."""
    n = len(paired)
    owner, replicate = first_runs(replicas, np.where(compared & ~paired, base, -1), limit)
    medians = replicas.replicate_medians()
    checks = (
        ("", runs_apart(ratios.cell, ratios.replicate_medians(), n), paired),
        ("", runs_apart(replicas.cell, medians, n), ~paired),
        ("eager cell's ", runs_apart(owner, medians[replicate], n), ~paired),
    )
    notes = np.full(n, None, dtype=object)
    for whose, found, which in checks:
        for i in np.flatnonzero(which & compared & (found.run >= 0) & pd.isna(notes)):
            notes[i] = apart_note(int(found.run[i]), float(found.offset[i]), whose)
    return notes


def median_samples(cells: pd.DataFrame, steps: pd.DataFrame) -> ReplicateSamples:
    """The measured steps of each completed cell of `cells`, by replicate."""
    code = cell_codes(steps["cell_id"], cells)
    done = (cells["status"] == COMPLETED).to_numpy()
    keep = (code >= 0) & (steps["phase"] == "measure").to_numpy()
    keep[keep] = done[code[keep]]
    return ReplicateSamples.from_steps(
        code[keep],
        steps[REPEAT].to_numpy(np.int64)[keep],
        steps["step_time_ms"].to_numpy(float)[keep],
        len(cells),
    )


def median_intervals(
    cells: pd.DataFrame, steps: pd.DataFrame, resamples: int = RESAMPLES, stream: tuple = MEDIAN_STREAM
) -> tuple[np.ndarray, np.ndarray]:
    """95% interval of each completed cell's median step (NaN for the others): the t interval over its
    runs where it has 2 or more, else the bootstrap of its one run's steps (`stream`: the generators')."""
    samples = median_samples(cells, steps)
    low, high = t_interval(RunLogs.of(samples, samples.replicate_medians()))
    one = np.flatnonzero(samples.replicates == 1)
    if len(one):
        draws = subset_cells(samples, one).hierarchical_medians(
            resamples, generators(cells, one, SEED, stream)
        )
        low[one], high[one] = percentile_interval(draws)
    return low, high


def median_ratio_intervals(
    cells: pd.DataFrame,
    steps: pd.DataFrame,
    top: np.ndarray,
    bottom: np.ndarray,
    resamples: int = RESAMPLES,
    stream: tuple = MEDIAN_STREAM,
) -> tuple[np.ndarray, np.ndarray]:
    """95% interval of the median step of the cell at top[i] over that of the cell at bottom[i]
    (positions in `cells`), as the per-cell table's speedups (`ratio_intervals` of their steps)."""
    return ratio_intervals(cells, median_samples(cells, steps), top, bottom, resamples, stream)


def ratio_intervals(
    cells: pd.DataFrame,
    samples: ReplicateSamples,
    top: np.ndarray,
    bottom: np.ndarray,
    resamples: int = RESAMPLES,
    stream: tuple = MEDIAN_STREAM,
) -> tuple[np.ndarray, np.ndarray]:
    """95% interval of the centre of the cell at top[i] over that of the cell at bottom[i] (positions
    in `cells`) of one value per replicate, the median of its `samples`: Welch's over runs where both
    have 2 runs or more (`across_runs`), else the ratio of their bootstrap draws, each cell's from its
    generator of `stream`, the same draws as the cell's own interval."""
    top, bottom = np.asarray(top, dtype=np.int64), np.asarray(bottom, dtype=np.int64)
    runs = RunLogs.of(samples, samples.replicate_medians())
    low, high = welch_interval(runs.take(top), runs.take(bottom))
    boot = np.flatnonzero(~across_runs(samples.replicates[top], samples.replicates[bottom]))
    if len(boot):
        involved = np.unique(np.concatenate([top[boot], bottom[boot]]))
        rngs = generators(cells, involved, SEED, stream)
        draws = subset_cells(samples, involved).hierarchical_medians(resamples, rngs)
        row = {position: r for r, position in enumerate(involved)}
        low[boot], high[boot] = ratio_interval(
            draws[[row[i] for i in top[boot]]], draws[[row[i] for i in bottom[boot]]]
        )
    return low, high


class Draws:
    """What the intervals of cells rest on: over runs, each replicate's median step (`median`) or
    steps per ms (`rate`, end-to-end) as `RunLogs`; within one run, bootstrap draws, each cell's from
    its own generator, so that they are the same whichever interval asks for them, and in any sweep.
    `level`: each cell's interval level (`interval_levels`)."""

    def __init__(
        self, cells: pd.DataFrame, replicas: ReplicateSamples, resamples: int, seed: int, level: np.ndarray
    ):
        self.cells, self.replicas, self.resamples, self.seed = cells, replicas, resamples, seed
        self.level = level
        self._rows: dict[str, dict[int, np.ndarray]] = {"median": {}, "rate": {}}
        replicate_mean, _ = group_moments(replicas.steps)
        with np.errstate(divide="ignore"):
            self.values = {"median": replicas.replicate_medians(), "rate": 1 / replicate_mean}
        self.runs = {kind: RunLogs.of(replicas, values) for kind, values in self.values.items()}

    def get(self, kind: str, which: np.ndarray) -> np.ndarray:
        """(len(which), resamples): two-level bootstrap draws of these cells' median step (`median`),
        or of their median over replicates of steps per ms, end-to-end (`rate`)."""
        rows = self._rows[kind]
        missing = np.array(sorted(set(which.tolist()) - set(rows)), dtype=np.int64)
        if len(missing):
            sub = subset_cells(self.replicas, missing)
            if kind == "median":
                draws = sub.hierarchical_medians(self.resamples, generators(self.cells, missing, self.seed))
            else:
                draws = hierarchical_means(
                    sub,
                    self.resamples,
                    generators(self.cells, missing, self.seed, MEAN_STREAM),
                    reciprocal=True,
                )
            rows.update(zip(missing.tolist(), draws))
        return np.array([rows[i] for i in which.tolist()], dtype=float).reshape(len(which), self.resamples)


def first_runs(
    samples: ReplicateSamples, base: np.ndarray, limit: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(owner, replicate) of the runs each cell i compares with: the first limit[i] runs of the cell at
    base[i] (all of them where limit[i] is inf), replicate positions in `samples`; none where base[i] < 0.
    A stopped repeats=auto cell's limit is its eager cell's runs when it stopped (`baseline_limits`):
    an eager cell that ran on for another cell is not what it was judged against."""
    base = np.asarray(base, dtype=np.int64)
    count = np.where(base >= 0, np.minimum(samples.replicates[np.maximum(base, 0)], limit), 0).astype(
        np.int64
    )
    owner = np.repeat(np.arange(len(base)), count)
    start = np.cumsum(count) - count
    replicate = samples.first[base[owner]] + np.arange(count.sum()) - start[owner]
    return owner, replicate


def baseline_limits(cells: pd.DataFrame, stopped_against: Mapping[str, int] | None) -> np.ndarray:
    """Per cell, how many of its eager cell's runs it is judged against: those its stop record names
    (`stopped_against`: {cell id: runs}, analysis/cells/loaded.py `auto_settings`), else all (inf)."""
    return cells["cell_id"].map(dict(stopped_against or {})).fillna(np.inf).to_numpy(float)


def draws_ratio_interval(
    draws: Draws,
    kind: str,
    base: np.ndarray,
    has_base: np.ndarray,
    invert: bool = True,
    limit: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Interval of (the `kind` statistic of the cell at `base`) / (own) — own / base's where not
    `invert` — for each cell where `has_base`: exactly 1 against itself, NaN where either has no steps.
    Where both have 2 replicates or more, Welch's over runs at the cell's level (`across_runs`), the
    base's first `limit` runs (`first_runs`; all where None); else the 95% interval of the two cells'
    bootstrap draws, which sees one run's steps only."""
    n = len(base)
    low, high = np.full(n, np.nan), np.full(n, np.nan)
    itself = has_base & (base == np.arange(n))
    low[itself] = high[itself] = 1.0  # the baseline against itself: exactly 1, no spread
    counts = draws.replicas.replicates
    across = has_base & ~itself & across_runs(counts, counts[base])
    if across.any():
        runs = draws.runs[kind]
        limit = np.full(n, np.inf) if limit is None else limit
        owner, replicate = first_runs(draws.replicas, np.where(has_base, base, -1), limit)
        theirs = RunLogs.from_values(owner, draws.values[kind][replicate], n)
        top, bottom = (theirs, runs) if invert else (runs, theirs)
        welch_low, welch_high = welch_interval(top, bottom, draws.level)
        low[across], high[across] = welch_low[across], welch_high[across]
    boot = np.flatnonzero(has_base & ~itself & ~across & (counts > 0) & (counts[base] > 0))
    if len(boot):
        own, reference = draws.get(kind, boot), draws.get(kind, base[boot])
        low[boot], high[boot] = ratio_interval(reference, own) if invert else ratio_interval(own, reference)
    return low, high


def across_runs(own: np.ndarray, other: np.ndarray) -> np.ndarray:
    """Whether the interval of a ratio of two cells with `own` and `other` replicates is over runs:
    both have 2 or more (else it is the bootstrap's, which sees one run's steps only)."""
    return (own >= 2) & (other >= 2)


def interval_levels(
    cells: pd.DataFrame, replicates: np.ndarray, auto_max_repeats: Mapping[str, int] | None
) -> np.ndarray:
    """Each cell's interval level: 95%, or for a cell run with repeats=auto (`auto_max_repeats`: its
    max_repeats by id) the level its stop rule spent at its replicates (decision.py `spent_level`), so
    that the table's verdict is the one the sweep stopped on."""
    most = cells["cell_id"].map(dict(auto_max_repeats or {})).to_numpy(float)
    return np.where(np.isnan(most), 0.95, spent_level(replicates, np.nan_to_num(most)))


def interval_texts(replicates: np.ndarray, across: np.ndarray, compared: np.ndarray) -> np.ndarray:
    """What each compared cell's interval rests on: `across 3 runs`, or `within one process` (its or
    its eager cell's one run: run-to-run spread unseen); None for the others."""
    texts = np.array([f"across {n} runs" for n in replicates], dtype=object)
    return np.where(compared, np.where(across, texts, WITHIN_ONE_PROCESS), None)
