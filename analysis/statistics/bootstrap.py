"""Statistics of many cells at once, vectorised over cells (a sweep can hold a million steps).

Cells are numbered 0..n-1 and every value carries its cell's number (`group`). The bootstrap
of a median does not materialise resamples: the median of a resample depends only on which
order statistics of the sample it picks, and those have a known law (see `bootstrap_medians`),
so R resamples cost O(R) per cell instead of O(R x steps). Each cell draws from its own
generator, so its interval does not depend on which other cells are analysed with it.

A cell run as one replicate (one process) is bootstrapped over its steps; with several, its printed
interval is the Student-t one over replicates (analysis/statistics/intervals.py) and the two-level
bootstrap here (replicates, then steps: `ReplicateSamples`) serves `unstable` and the few studies that
draw; `unstable` flags
replicates that disagree beyond their own intervals. What an interval says against a margin of
practical equivalence: analysis/statistics/verdicts.py `equivalence_verdict`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def group_mean_std(
    group: np.ndarray, values: np.ndarray, groups: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(count, mean, sample std with ddof=1) of each group's non-NaN values; NaN where undefined."""
    keep = ~np.isnan(values)
    group, values = group[keep], values[keep]
    count = np.bincount(group, minlength=groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(group, weights=values, minlength=groups) / count
        squares = np.bincount(group, weights=(values - mean[group]) ** 2, minlength=groups)
        std = np.sqrt(squares / (count - 1))
    std[count < 2] = np.nan
    return count, mean, std


def group_ratio_of_sums(
    group: np.ndarray, numerator: np.ndarray, denominator: np.ndarray, groups: int
) -> np.ndarray:
    """sum(numerator) / sum(denominator) per group, over the rows where both are known."""
    keep = ~(np.isnan(numerator) | np.isnan(denominator))
    top = np.bincount(group[keep], weights=numerator[keep], minlength=groups)
    bottom = np.bincount(group[keep], weights=denominator[keep], minlength=groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(bottom > 0, top / bottom, np.nan)


@dataclass(frozen=True)
class SortedSamples:
    """The samples of all groups in one array, each group's run ascending:
    group i is `values[start[i] : start[i] + count[i]]`."""

    values: np.ndarray
    start: np.ndarray
    count: np.ndarray

    @classmethod
    def from_groups(cls, group: np.ndarray, values: np.ndarray, groups: int) -> SortedSamples:
        """Sort non-NaN `values` by (group, value)."""
        keep = ~np.isnan(values)
        group, values = group[keep], values[keep]
        order = np.lexsort((values, group))
        count = np.bincount(group, minlength=groups)
        start = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)
        return cls(values[order], start, count)

    def _at(self, index: np.ndarray) -> np.ndarray:
        """values[start + index] per group (index: one per group, or a row per group); NaN for empty
        groups."""
        index = np.asarray(index)
        start = self.start.reshape((-1,) + (1,) * (index.ndim - 1))
        if not len(self.values):
            return np.full(np.broadcast(start, index).shape, np.nan)
        out = self.values[np.clip(start + index, 0, len(self.values) - 1)]
        return np.where((self.count == 0).reshape(start.shape), np.nan, out)

    def quantile(self, q: float) -> np.ndarray:
        """Each group's q-quantile, linearly interpolated as numpy's default (`median` at q=0.5)."""
        position = q * np.maximum(self.count - 1, 0)
        low = np.floor(position).astype(np.int64)
        high = np.minimum(low + 1, np.maximum(self.count - 1, 0))
        fraction = position - low
        return self._at(low) * (1 - fraction) + self._at(high) * fraction

    def resampled_medians(self, group: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """For each entry of `group` (group numbers, any shape), the median of one resample of that
        group drawn with replacement, all from `rng`; NaN for an empty group.

        Drawing n indices uniformly from 0..n-1 is floor(n*U) for n uniforms U, and floor is
        monotone, so the resample's k-th smallest value is sorted[floor(n * U_(k))], where the
        k-th order statistic of n uniforms is U_(k) ~ Beta(k, n+1-k). The median of an even
        resample also needs U_(k+1): given U_(k) = u, the other n-k uniforms lie in (u, 1), and
        their minimum is u + (1-u) * Beta(1, n-k). The result has exactly the law of
        `np.median(sample[rng.integers(0, n, n)])` without drawing n indices per resample.
        """
        group = np.asarray(group)
        if not len(self.values):
            return np.full(group.shape, np.nan)
        n = np.maximum(self.count[group], 1)
        k = (n + 1) // 2  # the lower middle order statistic (1-based)
        u_low = rng.beta(k, n + 1 - k)
        u_gap = rng.beta(1, np.maximum(n - k, 1))
        u_high = np.where(n % 2 == 0, u_low + (1 - u_low) * u_gap, u_low)
        first, last = self.start[group], len(self.values) - 1

        def at(u: np.ndarray) -> np.ndarray:
            return self.values[np.minimum(first + np.minimum(np.floor(n * u).astype(np.int64), n - 1), last)]

        return np.where(self.count[group] == 0, np.nan, (at(u_low) + at(u_high)) / 2)

    def bootstrap_medians(self, resamples: int, rngs: Sequence[np.random.Generator]) -> np.ndarray:
        """(groups, resamples): medians of resamples drawn with replacement, group i's from rngs[i]
        (see `resampled_medians`)."""
        medians = [self.resampled_medians(np.full(resamples, i), rng) for i, rng in enumerate(rngs)]
        return np.array(medians, dtype=float).reshape(len(self.count), resamples)


def percentile_interval(draws: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Per row of `draws`, the central interval holding `level` of the draws (NaN rows stay NaN)."""
    tail = 100 * (1 - level) / 2
    rows = ~np.isnan(draws).any(axis=1)
    low = np.full(len(draws), np.nan)
    high = np.full(len(draws), np.nan)
    if rows.any():
        low[rows], high[rows] = np.percentile(draws[rows], [tail, 100 - tail], axis=1)
    return low, high


def geometric_mean(values: np.ndarray) -> tuple[float, int]:
    """(geometric mean of the finite positive values, how many there were); NaN for none."""
    values = np.asarray(values, dtype=float)
    used = values[np.isfinite(values) & (values > 0)]
    return (float(np.exp(np.log(used).mean())) if len(used) else float("nan")), len(used)


@dataclass(frozen=True)
class ReplicateSamples:
    """The steps of every replicate (one process each) of many cells: replicate r's steps are group r
    of `steps`, and cell i's replicates are r in `first[i] : first[i] + replicates[i]`; `cell[r]` is
    replicate r's cell. A replicate without steps is left out: it measured nothing.

    A cell's location is the centre of its replicate medians (`medians`: the one replicate's median,
    or the geometric mean of several, whose interval is analysis/statistics/intervals.py's), and
    `hierarchical_medians` bootstraps it where one replicate leaves no spread between runs to use. The
    replicate, not the step, is the unit that repeats the experiment: steps of one process share its
    host, clocks and binding and are correlated, so each replicate counts once, however many steps it
    measured (a pooled median would weigh a long replicate more, and with an even split between two
    levels it jumps between them).
    """

    steps: SortedSamples
    cell: np.ndarray
    first: np.ndarray
    replicates: np.ndarray

    @classmethod
    def from_steps(
        cls, cell: np.ndarray, replicate: np.ndarray, values: np.ndarray, cells: int
    ) -> ReplicateSamples:
        """From one row per step: its cell (0..cells-1), its replicate (any integer label within
        the cell) and its value; NaN values are left out."""
        keep = ~np.isnan(values)
        cell, replicate = (
            np.asarray(cell)[keep].astype(np.int64),
            np.asarray(replicate)[keep].astype(np.int64),
        )
        # One integer per (cell, replicate) pair, in the pairs' order (a 1-D unique sorts ten times
        # faster than unique rows).
        lowest = replicate.min() if len(replicate) else 0
        span = int(replicate.max() - lowest + 1) if len(replicate) else 1
        labels, inverse = np.unique(cell * span + (replicate - lowest), return_inverse=True)
        cell_of = labels // span
        replicates = np.bincount(cell_of, minlength=cells)
        first = np.concatenate([[0], np.cumsum(replicates)[:-1]]).astype(np.int64)
        steps = SortedSamples.from_groups(inverse.ravel(), values[keep], len(labels))
        return cls(steps, cell_of, first, replicates)

    def replicate_medians(self) -> np.ndarray:
        """The median step of each replicate."""
        return self.steps.quantile(0.5)

    def medians(self) -> np.ndarray:
        """Each cell's median step: `centre_over_replicates` of its replicate medians; NaN for none."""
        return centre_over_replicates(self, self.replicate_medians())

    def hierarchical_medians(self, resamples: int, rngs: Sequence[np.random.Generator]) -> np.ndarray:
        """(cells, resamples): two-level bootstrap draws of `medians`, cell i's from rngs[i] (NaN rows
        for cells without steps).

        One draw of a cell with N replicates picks N replicates with replacement (level 1), resamples
        each pick's steps with replacement, a fresh resample per pick (level 2, `resampled_medians`),
        and takes the median of the N resampled medians. Level 2 adds within-replicate noise on top of
        the between-replicate spread that level 1 already contains, so the interval errs wide
        (Davison & Hinkley 1997, section 3.8), not narrow. With N = 1 there is no level-1 draw and the
        draws are exactly `SortedSamples.bootstrap_medians` of that replicate from the same generator.
        """
        draws = np.full((len(self.first), resamples), np.nan)
        for i, rng in enumerate(rngs):
            first, count = self.first[i], self.replicates[i]
            if count == 0:
                continue
            picks = (
                rng.integers(0, count, (resamples, count))
                if count > 1
                else np.zeros((resamples, 1), np.int64)
            )
            draws[i] = np.median(self.steps.resampled_medians(first + picks, rng), axis=1)
        return draws

    def spread(self) -> np.ndarray:
        """Each cell's coefficient of variation of its replicate medians (std with ddof=1 / mean);
        NaN with fewer than 2 replicates."""
        _, mean, std = group_mean_std(self.cell, self.replicate_medians(), len(self.first))
        with np.errstate(invalid="ignore", divide="ignore"):
            return std / mean

    def unstable(
        self, resamples: int, rngs: Sequence[np.random.Generator], level: float = 0.95, tolerance: float = 0.0
    ) -> tuple[np.ndarray, np.ndarray]:
        """(unstable, spread) per cell: unstable when the cell's replicates disagree beyond their own
        intervals, i.e. some two replicates' `level` one-level bootstrap intervals of the median are
        disjoint (intervals on a line overlap pairwise exactly when the largest low end is at most
        the smallest high end), by more than `tolerance` relative to the smaller: largest low >
        smallest high * (1 + tolerance). Then the step-only interval of one run understates what a
        re-run would give. Two 95% intervals of one law are disjoint with probability about 0.6%
        (normal, equal widths), so few false alarms for a handful of replicates; with thousands of steps
        per replicate the intervals are so narrow that a tolerance (e.g. the equivalence margin) keeps
        the flag about differences that matter. Cells with fewer than 2 replicates are never unstable.
        Replicate r's bootstrap draws from rngs[cell[r]]; `spread` is `spread()`.
        """
        low, high = percentile_interval(
            self.steps.bootstrap_medians(resamples, [rngs[c] for c in self.cell]), level
        )
        cells = len(self.first)
        largest_low, smallest_high = np.full(cells, np.nan), np.full(cells, np.nan)
        some = self.replicates > 0
        if some.any():
            largest_low[some] = np.maximum.reduceat(low, self.first[some])
            smallest_high[some] = np.minimum.reduceat(high, self.first[some])
        return (self.replicates > 1) & (largest_low > smallest_high * (1 + tolerance)), self.spread()


def ratio_interval(
    numerator: np.ndarray, denominator: np.ndarray, level: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the `level` percentile interval of numerator / denominator draw by draw: for a
    speedup, rows of the baseline's and of the compiled cell's `hierarchical_medians`. The two rows
    must be independent (each cell draws from its own generator); a cell against itself gives 1."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return percentile_interval(numerator / denominator, level)


def subset_cells(samples: ReplicateSamples, cells: np.ndarray) -> ReplicateSamples:
    """The replicates of these cells (positions in `samples`) as cells 0..len(cells)-1, sharing the
    step values: cell i's draws from a generator are those of cells[i] in `samples` from the same one."""
    cells = np.asarray(cells, dtype=np.int64)
    counts = samples.replicates[cells]
    first = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    rows = np.repeat(samples.first[cells] - first, counts) + np.arange(counts.sum(), dtype=np.int64)
    steps = SortedSamples(samples.steps.values, samples.steps.start[rows], samples.steps.count[rows])
    return ReplicateSamples(steps, np.repeat(np.arange(len(cells), dtype=np.int64), counts), first, counts)


def group_moments(samples: SortedSamples) -> tuple[np.ndarray, np.ndarray]:
    """(mean, population variance with ddof=0) of each group; NaN for an empty group."""
    groups = len(samples.count)
    group = np.repeat(np.arange(groups), samples.count)
    start = samples.start[:groups]  # (`from_groups` of no groups has one start)
    values = samples.values[np.repeat(start, samples.count) + _offsets(samples.count)]
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(group, weights=values, minlength=groups) / samples.count
        variance = np.bincount(group, weights=(values - mean[group]) ** 2, minlength=groups) / samples.count
    return mean, variance


def _offsets(count: np.ndarray) -> np.ndarray:
    """0..count[i]-1 for each group, concatenated."""
    total = int(count.sum())
    return np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)


#: Up to this many steps, a replicate's resampled mean is the mean of n values drawn with replacement
#: (n draws per resample); above it, a draw from its normal limit (see `hierarchical_means`).
EXACT_MEAN_STEPS = 100


def hierarchical_means(
    samples: ReplicateSamples,
    resamples: int,
    rngs: Sequence[np.random.Generator],
    reciprocal: bool = False,
    exact_up_to: int = EXACT_MEAN_STEPS,
) -> np.ndarray:
    """(len(rngs), resamples): two-level bootstrap draws of each cell's median over its replicates of
    the replicate's mean step — of 1 / mean step with `reciprocal`, a rate (steps per unit of time:
    end-to-end throughput) — cell i's from rngs[i]; NaN rows for cells without steps.

    As `ReplicateSamples.hierarchical_medians`: a draw picks N replicates with replacement, then
    resamples each pick's steps with replacement and takes the resample's mean. The mean has no
    order-statistic shortcut: up to `exact_up_to` steps the resample is drawn (n indices), above it
    its mean is drawn from its normal limit N(mean, variance / n) (the bootstrap law of a mean has
    exactly that mean and variance; central limit), clipped to the replicate's smallest and largest
    step, which no resampled mean can leave. Its skew, which the normal limit lacks, is the steps'
    skew / sqrt(n): under 0.3 above 100 steps even for a data-bound cell whose waits are rare and long.
    """
    steps = samples.steps
    mean, variance = group_moments(steps)
    low = steps._at(np.zeros(len(steps.count), np.int64))
    high = steps._at(np.maximum(steps.count - 1, 0))
    draws = np.full((len(rngs), resamples), np.nan)
    for i, rng in enumerate(rngs):
        first, count = samples.first[i], samples.replicates[i]
        if count == 0:
            continue
        picks = (
            rng.integers(0, count, (resamples, count)) if count > 1 else np.zeros((resamples, 1), np.int64)
        )
        means = np.empty(picks.shape)
        for j in range(count):
            where = picks == j
            r, k = first + j, int(where.sum())
            n = int(steps.count[r])
            if n <= exact_up_to:
                means[where] = steps.values[steps.start[r] + rng.integers(0, n, (k, n))].mean(axis=1)
            else:
                drawn = mean[r] + np.sqrt(variance[r] / n) * rng.standard_normal(k)
                means[where] = np.clip(drawn, low[r], high[r])
        with np.errstate(divide="ignore"):
            draws[i] = np.median(1 / means if reciprocal else means, axis=1)
    return draws


def centre_over_replicates(samples: ReplicateSamples, values: np.ndarray) -> np.ndarray:
    """Each cell's centre of one value per replicate (`values[r]` for replicate r; NaN and values <= 0
    left out): the value itself with one replicate, the geometric mean with more, the centre of the
    Student-t interval on the log scale (analysis/statistics/intervals.py). With two it is their
    arithmetic mean, the median of two, up to (difference / mean)^2 / 8: 0.01% at 3% apart."""
    values = np.asarray(values, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        logs = np.where(values > 0, np.log(values), np.nan)
    count, mean, _ = group_mean_std(samples.cell, logs, len(samples.first))
    single = SortedSamples.from_groups(samples.cell, np.where(values > 0, values, np.nan), len(samples.first))
    return np.where(count == 1, single.quantile(0.5), np.exp(mean))


def stable_hash(text: str) -> int:
    """A 64-bit number of the text, the same in every process (unlike hash()): with a cell's id it
    seeds the cell's own generators."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
