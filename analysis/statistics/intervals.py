"""Intervals over runs: what every table prints for a cell measured as two replicates (processes) or
more, vectorised over cells.

Each replicate gives one value (its median step, its median pair ratio, its 1 / mean step, its J/step)
and the replicate is the unit that repeats the experiment. A cell's centre is the geometric mean of
its replicates' values (bootstrap.py `centre_over_replicates`), and its interval the Student-t
interval on the log scale, exp(mean(log) ± t_{N-1} sd(log) / sqrt(N)) (`t_interval`). Two cells,
each with its own replicates (a compiled cell against its eager cell), give a ratio with Welch's
interval of the difference of their log means, Welch-Satterthwaite degrees of freedom
(`welch_interval`). Both take the level per
cell: repeats=auto spends its error over the rounds (analysis/statistics/decision.py `spent_level`).

Why not the two-level bootstrap (analysis/statistics/bootstrap.py, kept for one run): with N = 2 its
percentile interval is about [min, max] of the two runs and covers the true value 50-70% of the time;
the t interval with N - 1 degrees of freedom has its nominal coverage for normal log values, and the
median of a run's many steps is close to normal. Coverage measured: docs/measurement.md ("Intervals").
The t quantile is scipy.stats' (`t.ppf`, any real degrees of freedom). Welch's degrees of freedom are
computed here from each cell's count, mean and sd: scipy's Welch test takes the samples, one pair at a
time, and has no form for a product of ratios; tests/unit/analysis/test_statistics.py checks both intervals
against scipy's tests on the samples.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from analysis.statistics.bootstrap import ReplicateSamples, group_mean_std


@dataclass(frozen=True)
class RunLogs:
    """Per cell: how many replicates gave a positive value (`count`), the mean and the sample
    standard deviation (ddof=1; NaN below 2) of the logs of those values."""

    count: np.ndarray
    mean: np.ndarray
    sd: np.ndarray

    @classmethod
    def of(cls, samples: ReplicateSamples, values: np.ndarray) -> RunLogs:
        """From one value per replicate of `samples` (`values[r]` for replicate r), e.g.
        `samples.replicate_medians()`."""
        return cls.from_values(samples.cell, values, len(samples.first))

    @classmethod
    def from_values(cls, cell: np.ndarray, values: np.ndarray, cells: int) -> RunLogs:
        """From one value per replicate and its cell (0..cells-1); NaN and values <= 0 left out."""
        values = np.asarray(values, dtype=float)
        with np.errstate(invalid="ignore", divide="ignore"):
            logs = np.where(values > 0, np.log(values), np.nan)
        count, mean, sd = group_mean_std(np.asarray(cell), logs, cells)
        return cls(count, mean, sd)

    def take(self, index: np.ndarray) -> RunLogs:
        """These cells' (positions) logs, in that order."""
        return RunLogs(self.count[index], self.mean[index], self.sd[index])


def _t_level(level: np.ndarray | float, df: np.ndarray) -> np.ndarray:
    """The t quantile of a central `level` interval with `df` degrees of freedom, NaN where df < 1."""
    level, df = np.broadcast_arrays(np.asarray(level, dtype=float), np.asarray(df, dtype=float))
    out = np.full(df.shape, np.nan)
    known = (df >= 1) & np.isfinite(df) & (level > 0) & (level < 1)
    out[known] = stats.t.ppf(1 - (1 - level[known]) / 2, df[known])
    return out


def t_interval(logs: RunLogs, level: np.ndarray | float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) per cell: the Student-t `level` interval exp(mean ± t_{N-1} sd / sqrt(N)) of its
    replicates' log values, around their geometric mean (bootstrap.py `centre_over_replicates`);
    NaN below 2 replicates."""
    half = _t_level(level, logs.count - 1) * logs.sd / np.sqrt(np.maximum(logs.count, 1))
    return np.exp(logs.mean - half), np.exp(logs.mean + half)


def welch_interval(
    top: RunLogs, bottom: RunLogs, level: np.ndarray | float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) per cell of the ratio of top's centre to bottom's (e.g. the eager cell's median step over
    the compiled cell's: the speedup) with Welch's `level` interval of the difference of the log
    means, Welch-Satterthwaite degrees of freedom; low and high NaN unless both have 2 or more."""
    return welch_product_interval([top], [bottom], level)


def welch_product_interval(
    tops: list[RunLogs], bottoms: list[RunLogs], level: np.ndarray | float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """`welch_interval` of a product of ratios, per cell: prod(tops' centres) / prod(bottoms'), e.g. a
    speedup in one environment over that in another (two cells each); the variance of the sum of log
    means is the sum of theirs, its degrees of freedom Welch-Satterthwaite's over every part."""
    with np.errstate(invalid="ignore", divide="ignore"):
        parts = [logs.sd**2 / logs.count for logs in (*tops, *bottoms)]
        variance = sum(parts)
        error = np.sqrt(variance)
        df = variance**2 / sum(part**2 / (logs.count - 1) for part, logs in zip(parts, (*tops, *bottoms)))
    # No part with spread (identical runs): no spread to scale, the interval is the point.
    df = np.where(error == 0, np.inf, df)
    half = np.where(error == 0, 0.0, _t_level(level, df) * error)
    difference = sum(logs.mean for logs in tops) - sum(logs.mean for logs in bottoms)
    return np.exp(difference - half), np.exp(difference + half)
