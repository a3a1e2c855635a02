"""The vectorised statistics against numpy's own, group by group, the order-statistic bootstrap
of the median and the two-level bootstrap over replicates against resampling done the plain way,
the intervals over runs against scipy's tests and the hand-written t quantile they replaced, and what
replicates and equivalence verdicts tell a reader."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from analysis.statistics.bootstrap import (
    ReplicateSamples,
    SortedSamples,
    geometric_mean,
    group_mean_std,
    group_ratio_of_sums,
    percentile_interval,
    ratio_interval,
)
from analysis.statistics.intervals import RunLogs, t_interval, welch_interval, welch_product_interval
from analysis.statistics.verdicts import equivalence_verdict

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
    fast = SortedSamples.from_groups(np.zeros(n, int), sample, 1).bootstrap_medians(
        draws, [np.random.default_rng(1)]
    )[0]
    plain = np.median(sample[np.random.default_rng(2).integers(0, n, (draws, n))], axis=1)
    support = np.union1d(fast, plain)
    cdf = lambda x: np.searchsorted(np.sort(x), support, side="right") / draws  # noqa: E731
    assert np.abs(cdf(fast) - cdf(plain)).max() < 0.01
    assert set(np.unique(fast)) <= set(np.unique(plain)) | set(
        (sample[:, None] + sample[None, :]).ravel() / 2
    )


def test_bootstrap_of_many_groups_at_once(groups) -> None:
    group, values, per_group = groups
    medians = SortedSamples.from_groups(group, values, len(SIZES)).bootstrap_medians(
        200, [np.random.default_rng(i) for i in range(len(SIZES))]
    )
    assert medians.shape == (len(SIZES), 200)
    for i, sample in enumerate(per_group):
        if len(sample):
            assert sample.min() <= medians[i].min() and medians[i].max() <= sample.max()
        else:
            assert np.isnan(medians[i]).all()


def test_percentile_interval_and_geometric_mean() -> None:
    draws = np.vstack([np.arange(1, 1001, dtype=float), np.full(1000, np.nan)])
    low, high = percentile_interval(draws)
    assert (low[0], high[0]) == (
        pytest.approx(np.percentile(draws[0], 2.5)),
        pytest.approx(np.percentile(draws[0], 97.5)),
    )
    assert np.isnan(low[1]) and np.isnan(high[1])
    value, used = geometric_mean(np.array([2.0, 8.0, np.nan, -1.0]))
    assert (value, used) == (pytest.approx(4.0), 2)
    assert np.isnan(geometric_mean(np.array([np.nan]))[0])


def replicates_of(*cells: list[np.ndarray]) -> ReplicateSamples:
    """ReplicateSamples of cells given as lists of replicates' steps, rows shuffled."""
    rows = [(c, r, v) for c, reps in enumerate(cells) for r, steps in enumerate(reps) for v in steps]
    cell, replicate, values = (np.array(column) for column in zip(*rows))
    order = np.random.default_rng(0).permutation(len(values))
    return ReplicateSamples.from_steps(cell[order], replicate[order], values[order].astype(float), len(cells))


def cdf_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Largest distance between the empirical distribution functions of two samples."""
    support = np.union1d(a, b)
    cdf = lambda x: np.searchsorted(np.sort(x), support, side="right") / len(x)  # noqa: E731
    return float(np.abs(cdf(a) - cdf(b)).max())


def test_hierarchical_bootstrap_has_the_law_of_resampling_replicates_then_steps() -> None:
    """Against two-level resampling done the plain way (pick 3 replicates, resample each pick's
    steps, median of the 3 medians), 100,000 draws each; replicates of 7, 4 (even) and 9 steps.
    Two samples of 100,000 from one law are 0.0087 apart in CDF at most with probability 99.9%
    (Kolmogorov), less for these discrete laws; an estimator without level 1 or level 2 is far
    further off. The interval's ends must sit at the 2.5% and 97.5% points of the plain draws
    within the same tolerance (read as ranks, since the law has atoms)."""
    draws, tolerance = 100_000, 0.01
    rng = np.random.default_rng(7)
    reps = [rng.lognormal(np.log(m), 0.1, n) for m, n in [(10, 7), (11, 4), (12.5, 9)]]
    fast = replicates_of(reps).hierarchical_medians(draws, [np.random.default_rng(1)])[0]
    plain_rng = np.random.default_rng(2)
    picks = plain_rng.integers(0, 3, (draws, 3))
    medians = np.empty((draws, 3))
    for j, steps in enumerate(reps):
        chosen = picks == j
        medians[chosen] = np.median(
            steps[plain_rng.integers(0, len(steps), (chosen.sum(), len(steps)))], axis=1
        )
    plain = np.median(medians, axis=1)
    assert cdf_distance(fast, plain) < tolerance
    for end, q in zip(percentile_interval(fast[None, :]), (0.025, 0.975)):
        assert (plain < end[0]).mean() <= q + tolerance and (plain <= end[0]).mean() >= q - tolerance


@pytest.mark.parametrize("n", [1, 6, 31])
def test_one_replicate_is_the_one_level_bootstrap(n: int) -> None:
    """A single run keeps its numbers: draws, interval and point estimate are the one-level ones."""
    steps = np.random.default_rng(n).lognormal(2, 0.3, n)
    hierarchical = replicates_of([steps])
    one_level = SortedSamples.from_groups(np.zeros(n, int), steps, 1)
    draws = hierarchical.hierarchical_medians(2000, [np.random.default_rng(5)])
    np.testing.assert_array_equal(draws, one_level.bootstrap_medians(2000, [np.random.default_rng(5)]))
    assert hierarchical.medians()[0] == np.median(steps)
    assert (
        np.isnan(hierarchical.spread()[0])
        and not hierarchical.unstable(200, [np.random.default_rng(5)])[0][0]
    )


def test_shifted_replicates_widen_the_interval_and_are_unstable() -> None:
    """Three runs at 12, 13.5 and 15 ms with 0.1% noise inside each: the step-only interval of the
    pooled steps is narrow and misses both 12 and 15; the hierarchical one covers them; the cell
    is unstable, the speedup interval against a steady 30 ms baseline spans 30/15 to 30/12.
    Five runs drawn from one law are not unstable."""
    rng = np.random.default_rng(11)
    shifted = [m * (1 + 0.001 * rng.standard_normal(200)) for m in (12.0, 13.5, 15.0)]
    steady = [rng.lognormal(np.log(12), 0.05, 200) for _ in range(5)]
    baseline = [30 * (1 + 0.001 * rng.standard_normal(200)) for _ in range(3)]
    cells = replicates_of(shifted, steady, baseline)
    rngs = [np.random.default_rng(i) for i in range(3)]
    draws = cells.hierarchical_medians(4000, rngs)
    low, high = percentile_interval(draws)
    assert low[0] < 12.1 and high[0] > 14.9
    pooled = np.concatenate(shifted)
    step_low, step_high = percentile_interval(
        SortedSamples.from_groups(np.zeros(len(pooled), int), pooled, 1).bootstrap_medians(
            4000, [np.random.default_rng(0)]
        )
    )
    assert (
        12.1 < step_low[0] and step_high[0] < 14.9 and step_high[0] - step_low[0] < 0.1 * (high[0] - low[0])
    )
    unstable, spread = cells.unstable(1000, rngs)
    assert list(unstable) == [True, False, False]
    assert spread[0] == pytest.approx(np.std([12, 13.5, 15], ddof=1) / 13.5, rel=0.01)
    speedup_low, speedup_high = ratio_interval(draws[[2]], draws[[0]])
    assert speedup_low[0] < 30 / 14.9 and speedup_high[0] > 30 / 12.1
    assert ratio_interval(draws[[2]], draws[[2]]) == (pytest.approx([1.0]), pytest.approx([1.0]))
    # a tolerance larger than the shifts silences the flag
    assert not cells.unstable(1000, [np.random.default_rng(i) for i in range(3)], tolerance=0.3)[0].any()


def test_spread_and_medians_match_numpy() -> None:
    rng = np.random.default_rng(4)
    cells = [[rng.lognormal(2, 0.2, n) for n in sizes] for sizes in ([5, 8, 3, 10], [4], [], [6, 6])]
    replicates = replicates_of(*cells)
    spread, medians = replicates.spread(), replicates.medians()
    for i, reps in enumerate(cells):
        replicate_medians = np.array([np.median(r) for r in reps])
        if len(reps) > 1:
            assert spread[i] == pytest.approx(replicate_medians.std(ddof=1) / replicate_medians.mean())
        else:
            assert np.isnan(spread[i])
        if reps:
            # One run: its median; more: the geometric mean of the medians (the t interval's centre).
            assert medians[i] == pytest.approx(np.exp(np.log(replicate_medians).mean()))
        else:
            assert np.isnan(medians[i])
    assert list(replicates.replicates) == [4, 1, 0, 2]


def test_equivalence_verdicts_at_the_boundaries() -> None:
    m = 0.02
    intervals = {
        (1 - m, 1 + m): "no difference",  # ends included
        (1.005, 1.01): "no difference",  # real but negligible
        (1 - m - 1e-9, 1.0): "undecided",
        (1.0, 1.05): "undecided",  # low == 1 is not faster
        (1 + 1e-9, 1 + m + 1e-9): "faster",
        (1.01, 1.5): "faster",
        (0.9, 1.0): "undecided",  # high == 1 is not slower
        (0.5, 1 - 1e-9): "slower",
        (0.9, 1.1): "undecided",
        (np.nan, 1.0): None,
    }
    low, high = np.array(list(intervals)).T
    assert list(equivalence_verdict(low, high, m)) == list(intervals.values())
    assert list(equivalence_verdict(np.array([0.97]), np.array([0.99]), margin=0.05)) == ["no difference"]


#: Intervals over runs on fixed logs (count, mean, sd per cell), as the hand-written t quantile (the
#: regularized incomplete beta, inverted by bisection) gave them at commit 73b06f7, before scipy.stats
#: replaced it: t intervals with N - 1 = 1, 2, 3, 4, 7 degrees of freedom at 95% and at levels that
#: repeats=auto spends, and Welch intervals with 1.02-4.22 degrees of freedom (not whole).
NAN = float("nan")
OLD_T = (
    [0.6694740401791275, 0.7022518586793719, 1.162089201744062, 0.8139133387136882, 1.0904640136019195, NAN],
    [1.5860757592053156, 0.9545294010274571, 1.2583238767210208, 1.2286320329636125, 1.1200761720927825, NAN],
)
OLD_WELCH = (
    [0.8081441734769037, 0.8634540013121763, 0.6232354033698402, 1.1051709180756477, NAN, 0.8955100752039625],
    [1.5113673998357136, 1.7277407891725207, 1.3949115064679847, 1.1051709180756477, NAN, 1.1166820203248284],
)
OLD_PRODUCT = ([0.6538236297873028, 0.7297344499124051], [1.252219583046158, 1.1913350609980942])


def test_the_intervals_over_runs_are_those_of_the_hand_written_t_quantile() -> None:
    """scipy's t quantile gives the intervals the hand-written one gave, to 1e-9: one replicate has
    none, two cells without spread give the point, one without a second replicate none."""
    logs = RunLogs(
        np.array([2, 3, 4, 5, 8, 1]),
        np.array([0.03, -0.2, 0.19, 0.0, 0.1, 0.0]),
        np.array([0.048, 0.03, 0.025, 0.1, 0.02, NAN]),
    )
    top = RunLogs(
        np.array([2, 3, 5, 4, 2, 3]),
        np.array([0.1, 0.3, -0.05, 0.2, 0.1, 0.0]),
        np.array([0.05, 0.01, 0.2, 0.0, 0.05, 0.02]),
    )
    bottom = RunLogs(
        np.array([3, 2, 4, 4, 1, 3]),
        np.array([0.0, 0.1, 0.02, 0.1, 0.0, 0.0]),
        np.array([0.02, 0.08, 0.03, 0.0, NAN, 0.02]),
    )
    found = {
        "t": t_interval(logs, np.array([0.95, 0.9875, 0.95, 0.99, 0.9, 0.95])),
        "welch": welch_interval(top, bottom, np.array([0.95, 0.9, 0.99, 0.95, 0.95, 0.9975])),
        "product": welch_product_interval(
            [top.take(np.array([0, 2])), bottom.take(np.array([1, 0]))],
            [bottom.take(np.array([0, 2])), top.take(np.array([1, 5]))],
        ),
    }
    for name, old in {"t": OLD_T, "welch": OLD_WELCH, "product": OLD_PRODUCT}.items():
        for end, expected in zip(found[name], old):
            assert end == pytest.approx(np.array(expected), rel=1e-9, nan_ok=True), name


@pytest.mark.parametrize("sizes, level", [((2, 3), 0.95), ((3, 2), 0.9875), ((5, 4), 0.99), ((8, 3), 0.9)])
def test_the_intervals_over_runs_are_scipys_t_tests_on_the_samples(
    sizes: tuple[int, int], level: float
) -> None:
    """From the replicates' logs as scipy.stats takes them: the t interval is `ttest_1samp`'s, the Welch
    interval of the ratio `ttest_ind(equal_var=False)`'s (Welch-Satterthwaite degrees of freedom)."""
    rng = np.random.default_rng(sum(sizes))
    samples = [rng.lognormal(0.1 * n, 0.05 * n, n) for n in sizes]
    cell = np.concatenate([np.full(n, i) for i, n in enumerate(sizes)])
    logs = RunLogs.from_values(cell, np.concatenate(samples), 2)
    top, bottom = logs.take(np.array([0])), logs.take(np.array([1]))
    one = stats.ttest_1samp(np.log(samples[0]), 0).confidence_interval(level)
    welch = stats.ttest_ind(np.log(samples[0]), np.log(samples[1]), equal_var=False).confidence_interval(
        level
    )
    assert np.concatenate(t_interval(top, level)) == pytest.approx(np.exp([one.low, one.high]), rel=1e-9)
    assert np.concatenate(welch_interval(top, bottom, level)) == pytest.approx(
        np.exp([welch.low, welch.high]), rel=1e-9
    )
