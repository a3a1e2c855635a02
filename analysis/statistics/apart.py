"""Runs that stand apart: a run whose value (its median step, its median pair ratio) is off the
cell's other runs by more than their spread allows, named so that a verdict never rests silently on it.

The rule, per cell of N >= MIN_RUNS runs, on the log scale: run i's leave-one-out t statistic
|x_i - mean(others)| / (sd(others) sqrt(1 + 1/(N-1))) has Student's t law with N - 2 degrees of freedom
when the runs are normal with one spread (the studentized deleted residual); a cell has a run apart
when its largest statistic exceeds the t quantile at APART_ALPHA / (2N) (Bonferroni over its N runs)
and that run is at least MIN_APART off the others' geometric mean. So on clean normal runs a cell
names a run apart in at most APART_ALPHA of sweeps, whatever their spread and N (measured:
tests/unit/analysis/test_simulation.py `test_a_clean_cell_names_a_run_apart_rarely`). What it can
see: with 1% between runs, a run 10% off is named in 16% of cells at N = 4, 44% at 5, 89% at 7 and
99% at 10; with 3 runs, or beside 3% between runs, it cannot be told from the noise (docs/analysis.md
"Runs that stand apart").

A cell with a run apart gets no verdict ('undecided'): its interval is about the typical run, and one
run that stands apart says the runs are not alike (a host that helped one side in one process).
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
        total, squares = x.sum(axis=1, keepdims=True), (x**2).sum(axis=1, keepdims=True)
        others = (total - x) / (n - 1)
        with np.errstate(invalid="ignore", divide="ignore"):
            spread = np.sqrt(np.maximum(squares - x**2 - (n - 1) * others**2, 0) / (n - 2))
            score = np.abs(x - others) / (spread * np.sqrt(1 + 1 / (n - 1)))
        score = np.where(np.isnan(score), 0.0, score)  # a run equal to identical others
        worst = np.argmax(score, axis=1)
        rows = np.arange(len(which))
        off = np.expm1(x[rows, worst] - others[rows, worst])
        named = (score[rows, worst] > stats.t.ppf(1 - alpha / (2 * n), n - 2)) & (np.abs(off) >= MIN_APART)
        named &= ~np.isnan(x).any(axis=1)
        run[which[named]], offset[which[named]] = worst[named], off[named]
    return Apart(run, offset)


def apart_note(run: int, offset: float, whose: str = "", why: str = "") -> str:
    """`run 5 is 12% above the others` (`whose`: `eager cell's ` for the run of a cell compared with);
    `why`: what explains it, `: its host probe 18% slower`, for the host probe to fill."""
    side = "above" if offset > 0 else "below"
    return f"{whose}run {run + 1} is {abs(offset):.0%} {side} the others{why}"
