"""Statistics of many cells at once, vectorised over cells (a sweep can hold a million steps).

Cells are numbered 0..n-1 and every value carries its cell's number (`group`). The bootstrap
of a median does not materialise resamples: the median of a resample depends only on which
order statistics of the sample it picks, and those have a known law (see `bootstrap_medians`),
so R resamples cost O(R) per cell instead of O(R x steps). Each cell draws from its own
generator, so its interval does not depend on which other cells are analysed with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


def group_mean_std(group: np.ndarray, values: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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


def group_ratio_of_sums(group: np.ndarray, numerator: np.ndarray, denominator: np.ndarray,
                        groups: int) -> np.ndarray:
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
        """values[start + index] per group (index: one per group, or a row per group); NaN for empty groups."""
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

    def bootstrap_medians(self, resamples: int, rngs: Sequence[np.random.Generator]) -> np.ndarray:
        """(groups, resamples): medians of resamples drawn with replacement, group i's from rngs[i].

        Drawing n indices uniformly from 0..n-1 is floor(n*U) for n uniforms U, and floor is
        monotone, so the resample's k-th smallest value is sorted[floor(n * U_(k))], where the
        k-th order statistic of n uniforms is U_(k) ~ Beta(k, n+1-k). The median of an even
        resample also needs U_(k+1): given U_(k) = u, the other n-k uniforms lie in (u, 1), and
        their minimum is u + (1-u) * Beta(1, n-k). The result has exactly the law of
        `np.median(sample[rng.integers(0, n, n)])` without drawing n indices per resample.
        """
        n = np.maximum(self.count, 1)[:, None]
        k = (n + 1) // 2  # the lower middle order statistic (1-based)
        u_low = np.array([rng.beta(a, b, resamples) for rng, a, b in zip(rngs, k[:, 0], n[:, 0] + 1 - k[:, 0])])
        u_gap = np.array([rng.beta(1, b, resamples) for rng, b in zip(rngs, np.maximum(n - k, 1)[:, 0])])
        u_low, u_gap = u_low.reshape(len(n), resamples), u_gap.reshape(len(n), resamples)
        u_high = np.where(n % 2 == 0, u_low + (1 - u_low) * u_gap, u_low)
        index = lambda u: np.minimum(np.floor(n * u).astype(np.int64), n - 1)  # noqa: E731
        return (self._at(index(u_low)) + self._at(index(u_high))) / 2


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
