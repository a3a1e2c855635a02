"""Simulated replicates of known truth for the statistics simulations (tests/unit/analysis/
test_simulation.py, test_misspecified.py): each replicate's values built as
`ReplicateSamples.from_steps` builds them."""

from __future__ import annotations

import math

import numpy as np

from analysis.statistics.bootstrap import ReplicateSamples, SortedSamples

#: Steps of a replicate (drawn per replicate), pairs of a paired replicate.
STEPS, PAIRS = (50, 200), (10, 20)


def skewed(rng: np.random.Generator, size: int) -> np.ndarray:
    """Noise with sd 1 and median 0, skewed right as step times are (rare slow steps): a Gumbel."""
    return (rng.gumbel(size=size) + math.log(math.log(2))) / (math.pi / math.sqrt(6))


def replicate_samples(
    rng: np.random.Generator, cells: int, runs: int, truth: float, between: float, within: float, sizes: tuple
) -> ReplicateSamples:
    """`runs` replicates of each of `cells` cells whose replicate r's values have median truth x
    exp(b_r), b_r ~ N(0, between), each value times exp(within x skewed noise), `sizes` values each.
    Built as `ReplicateSamples.from_steps` builds it (each replicate's values ascending), with one
    sort of replicate number + a fraction below 1 that orders the values: 5x faster."""
    replicates = cells * runs
    counts = rng.integers(sizes[0], sizes[1] + 1, replicates)
    replicate = np.repeat(np.arange(replicates), counts)
    values = truth * np.exp(
        np.repeat(rng.normal(0, between, replicates), counts) + within * skewed(rng, len(replicate))
    )
    order = np.argsort(replicate + values / (2 * values.max()))
    start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    steps = SortedSamples(values[order], start, counts)
    return ReplicateSamples(
        steps, np.repeat(np.arange(cells), runs), np.arange(cells) * runs, np.full(cells, runs)
    )
