"""The vectorised statistics against numpy's own, group by group, and the order-statistic
bootstrap of the median against resampling done the plain way."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.stats import SortedSamples, geometric_mean, group_mean_std, group_ratio_of_sums, percentile_interval

#: Group sizes that cover one value, even and odd counts, and an empty group.
SIZES = [1, 2, 3, 10, 11, 0, 57]


@pytest.fixture
def groups() -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """(group of each value, values, values per group), the values shuffled across groups."""
    rng = np.random.default_rng(3)
    per_group = [rng.lognormal(2, 0.5, n) for n in SIZES]
    group = np.concatenate([np.full(n, i) for i, n in enumerate(SIZES)])
    values = np.concatenate(per_group)
    order = rng.permutation(len(values))
    return group[order], values[order], per_group


def test_quantiles_mean_and_std_match_numpy(groups) -> None:
    group, values, per_group = groups
    samples = SortedSamples.from_groups(group, values, len(SIZES))
    count, mean, std = group_mean_std(group, values, len(SIZES))
    for i, sample in enumerate(per_group):
        assert count[i] == len(sample)
        if not len(sample):
            assert np.isnan(samples.quantile(0.5)[i]) and np.isnan(mean[i])
            continue
        for q in (0.05, 0.5, 0.95):
            assert samples.quantile(q)[i] == pytest.approx(np.quantile(sample, q))
        assert mean[i] == pytest.approx(sample.mean())
        if len(sample) > 1:
            assert std[i] == pytest.approx(sample.std(ddof=1))
        else:
            assert np.isnan(std[i])


def test_nan_values_are_left_out() -> None:
    group = np.array([0, 0, 0, 1])
    values = np.array([1.0, np.nan, 3.0, np.nan])
    samples = SortedSamples.from_groups(group, values, 2)
    assert list(samples.count) == [2, 0]
    assert samples.quantile(0.5)[0] == 2.0 and np.isnan(samples.quantile(0.5)[1])
    ratio = group_ratio_of_sums(group, np.array([1.0, 5.0, 1.0, 1.0]), values, 2)
    assert ratio[0] == pytest.approx(2 / 4) and np.isnan(ratio[1])


@pytest.mark.parametrize("n", [1, 2, 5, 10, 11])
def test_bootstrap_median_has_the_law_of_resampling(n: int) -> None:
    """The distribution of bootstrap medians drawn from order statistics equals that of medians of
    explicit resamples (Kolmogorov distance within Monte Carlo noise of 100,000 draws each)."""
    draws = 100_000
    sample = np.random.default_rng(n).lognormal(0, 1, n)
    fast = SortedSamples.from_groups(np.zeros(n, int), sample, 1).bootstrap_medians(draws, [np.random.default_rng(1)])[0]
    plain = np.median(sample[np.random.default_rng(2).integers(0, n, (draws, n))], axis=1)
    support = np.union1d(fast, plain)
    cdf = lambda x: np.searchsorted(np.sort(x), support, side="right") / draws  # noqa: E731
    assert np.abs(cdf(fast) - cdf(plain)).max() < 0.01
    assert set(np.unique(fast)) <= set(np.unique(plain)) | set((sample[:, None] + sample[None, :]).ravel() / 2)


def test_bootstrap_of_many_groups_at_once(groups) -> None:
    group, values, per_group = groups
    medians = SortedSamples.from_groups(group, values, len(SIZES)).bootstrap_medians(200, [np.random.default_rng(i) for i in range(len(SIZES))])
    assert medians.shape == (len(SIZES), 200)
    for i, sample in enumerate(per_group):
        if len(sample):
            assert sample.min() <= medians[i].min() and medians[i].max() <= sample.max()
        else:
            assert np.isnan(medians[i]).all()


def test_percentile_interval_and_geometric_mean() -> None:
    draws = np.vstack([np.arange(1, 1001, dtype=float), np.full(1000, np.nan)])
    low, high = percentile_interval(draws)
    assert (low[0], high[0]) == (pytest.approx(np.percentile(draws[0], 2.5)), pytest.approx(np.percentile(draws[0], 97.5)))
    assert np.isnan(low[1]) and np.isnan(high[1])
    value, used = geometric_mean(np.array([2.0, 8.0, np.nan, -1.0]))
    assert (value, used) == (pytest.approx(4.0), 2)
    assert np.isnan(geometric_mean(np.array([np.nan]))[0])
