"""Runs that stand apart: a run whose value (its median step, its median pair ratio) is off the
cell's other runs by more than their spread allows, named so that a verdict never rests silently on it.

The rule, per cell of N >= MIN_RUNS runs, on the log scale: Rosner's generalized ESD test (1983), the
Grubbs test repeated so that two runs apart do not hide each other. Up to (N - 2) // 2 times the run
furthest from the mean of the runs left, in their sd, is set aside; the runs apart are those set aside
up to the last step whose statistic exceeds its critical value (from the t quantile at
APART_ALPHA / (2 m s), m runs left, s steps: Bonferroni over runs and steps). The cell's named run is
the one furthest from the geometric mean of the others, and only where it is at least MIN_APART off.
The rule is scale-free: on normal runs of any spread a cell names a run apart in at most APART_ALPHA
of sweeps (tests/unit/analysis/test_misspecified.py `test_a_clean_cell_names_a_run_apart_rarely`).
With 3 runs no run can be told apart (two runs' spread cannot say which of three is odd), nor one
whose offset is within the runs' own spread (docs/measurement.md "When the runs are not alike").

A cell with a run apart gets no verdict ('undecided', analysis/statistics/verdicts.py), and
repeats=auto does not stop it on one (analysis/statistics/decision.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

#: The chance that a cell of clean normal runs names a run apart, and the fewest runs the rule tests
#: (with 3, two runs' spread cannot tell which of the three is odd: its t has 1 degree of freedom).
APART_ALPHA, MIN_RUNS = 0.01, 4
#: The least offset from the others that is named: half the default equivalence margin, so that a run
#: among identical ones (sd 0) is not called apart for a rounding's difference.
MIN_APART = 0.01


@dataclass(frozen=True)
class Apart:
    """Per cell: the run apart (its position among the cell's runs, 0-based; -1 for none) and its
    value over the others' geometric mean, minus 1 (NaN for none)."""

    run: np.ndarray
    offset: np.ndarray

    def take(self, index: np.ndarray) -> Apart:
        """These cells' (positions), in that order."""
        return Apart(self.run[index], self.offset[index])


def runs_apart(cell: np.ndarray, values: np.ndarray, cells: int, alpha: float = APART_ALPHA) -> Apart:
    """The run apart of each of `cells` cells (module doc), from one positive value per run and its
    cell (0..cells-1), runs of a cell in their order; a cell with a NaN or non-positive value is not
    tested."""
    cell = np.asarray(cell, dtype=np.int64)
    order = np.argsort(cell, kind="stable")
    cell, value = cell[order], np.asarray(values, dtype=float)[order]
    with np.errstate(invalid="ignore", divide="ignore"):
        logs = np.log(np.where(value > 0, value, np.nan))
    count = np.bincount(cell, minlength=cells)
    first = np.concatenate([[0], np.cumsum(count)[:-1]])
    run, offset = np.full(cells, -1), np.full(cells, np.nan)
    for n in np.unique(count[count >= MIN_RUNS]):
        which = np.flatnonzero(count == n)
        x = logs[first[which, None] + np.arange(n)]
        apart = _generalized_esd(x, alpha)
        others = np.nanmean(np.where(apart, np.nan, x), axis=1)
        off = np.expm1(x - others[:, None])
        worst = np.argmax(np.where(apart, np.abs(off), -1.0), axis=1)
        rows = np.arange(len(which))
        named = apart.any(axis=1) & (np.abs(off[rows, worst]) >= MIN_APART) & ~np.isnan(x).any(axis=1)
        run[which[named]], offset[which[named]] = worst[named], off[rows, worst][named]
    return Apart(run, offset)


def _generalized_esd(x: np.ndarray, alpha: float) -> np.ndarray:
    """(cells, n) whether each run is apart by Rosner's generalized ESD test (module doc): up to
    (n - 2) // 2 runs (at least 1), each step's most extreme run of those left against its critical
    value; the runs apart are the first k removed, k the last step whose statistic exceeds it."""
    n = x.shape[1]
    left = x.copy()
    removed, exceeds = [], []
    steps = max((n - 2) // 2, 1)
    for i in range(1, steps + 1):
        m = n - i + 1  # runs left before this step
        with np.errstate(invalid="ignore", divide="ignore"):
            score = np.abs(left - np.nanmean(left, axis=1, keepdims=True)) / np.nanstd(
                left, axis=1, ddof=1, keepdims=True
            )
        score = np.where(np.isnan(score) & ~np.isnan(left), 0.0, score)  # identical runs: none apart
        worst = np.nanargmax(np.where(np.isnan(score), -1.0, score), axis=1)
        t = stats.t.ppf(1 - alpha / (2 * m * steps), m - 2)
        critical = (m - 1) * t / np.sqrt((m - 2 + t**2) * m)
        exceeds.append(score[np.arange(len(x)), worst] > critical)
        removed.append(worst)
        left[np.arange(len(x)), worst] = np.nan
    beyond = np.array(exceeds).T  # (cells, steps)
    last = np.where(beyond.any(axis=1), steps - np.argmax(beyond[:, ::-1], axis=1), 0)
    apart = np.zeros(x.shape, bool)
    for i, worst in enumerate(removed):
        rows = np.flatnonzero(last > i)
        apart[rows, worst[rows]] = True
    return apart


def apart_note(run: int, offset: float, whose: str = "", why: str = "") -> str:
    """`run 5 is 12% above the others` (`whose`: `eager cell's ` for the run of a cell compared with);
    `why`: what explains it, `: its host probe 18% slower`, for the host probe to fill."""
    side = "above" if offset > 0 else "below"
    return f"{whose}run {run + 1} is {abs(offset):.0%} {side} the others{why}"
