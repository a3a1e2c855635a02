"""Simulated sweeps where the world is not the model the intervals assume (issue 50 item 3), through
the functions the tables and repeats=auto use: one run in five apart (+10% on the paired ratio, or on
the compiled side of an unpaired cell), Student-t between-run noise (3 degrees of freedom), a drift
of the host across rounds, and two compiled cells sharing one eager cell under repeats=auto.

The quantity is the typical run (docs/measurement.md "Intervals over runs"): the median of the law a
run's value is drawn from (with runs apart, the runs' offsets are shifted so that it is the truth), at
equal host speed. In each case the tool either decides
correctly or refuses: a cell is *misled* where no run is named apart (analysis/statistics/apart.py)
and its 95% interval misses the truth, or where repeats=auto decides faster or slower at a true 1.00x.
Asserted: misled intervals at most 10%, false decisions at most 5%, each within 3 binomial standard
errors of TRIALS sweeps (sqrt(p (1 - p) / TRIALS): 0.0067 at p = 0.10, 0.0049 at p = 0.05). Fixed
seeds, one vectorised call per case. `python tests/unit/analysis/test_misspecified.py` prints the
table of docs/measurement.md ("When the runs are not alike").
"""

from __future__ import annotations

import functools
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

if __name__ == "__main__":  # run as a script from anywhere
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from analysis.cells.uncertainty import Draws, draws_ratio_interval
from analysis.statistics.apart import APART_ALPHA, runs_apart
from analysis.statistics.bootstrap import ReplicateSamples, SortedSamples
from analysis.statistics.decision import FASTER, MIN_REPLICATES, SLOWER, decisions, spent_level
from analysis.statistics.intervals import RunLogs, t_interval, welch_interval
from analysis.statistics.verdicts import equivalence_verdict
from orchestrator.grid.cells import Cell, Grid
from tests.helpers.simulated_runs import PAIRS, STEPS, replicate_samples
from workloads.cell.paired import COMPILED_SIDE, pair_sides
from workloads.contract.vocabulary import EQUIVALENCE

TRIALS = 2000
#: The typical run's speedup, the runs-apart share and offset, the host's drift per round (log).
SPEEDUP, APART_SHARE, APART_BY, DRIFT = 1.3, 0.2, math.log(1.1), 0.01
CASES = ("normal", "t3", "apart on the ratio", "apart on one side", "drift")
BETWEEN, WITHIN = (0.01, 0.03), 0.01
#: The share of misled intervals and of false decisions issue 50 accepts.
MOST_MISLED, MOST_FALSE = 0.10, 0.05


def _bound(p: float) -> float:
    return p + 3 * math.sqrt(p * (1 - p) / TRIALS)


def paired_case(case: str) -> bool:
    """Whether the case's cell is paired: a drift and one side apart move an unpaired cell only."""
    return case in ("normal", "t3", "apart on the ratio")


@functools.cache
def median_shift(between: float, by: float, draws: int = 1_000_000) -> float:
    """The median of N(0, between) plus `by` in APART_SHARE of draws: how far runs apart move the
    typical run (0.3% at 1% between, 1.0% at 3%, of a 10% offset), `draws` draws (SE ~1e-5)."""
    rng = np.random.default_rng(11)
    return float(np.median(rng.normal(0, between, draws) + by * (rng.random(draws) < APART_SHARE)))


def run_second(runs: int, side: int) -> np.ndarray:
    """(runs,) whether the eager cell (`side` 0) or the compiled one (1) of a two-cell grid runs second in
    each round, in the order the sweep runs them (orchestrator/grid/cells.py `Grid.round_order`)."""
    grid = Grid([Cell(name, (), {}) for name in ("eager", "compiled")], Path("."), {})
    return np.array(
        [[c.cell_id for c in grid.round_order(r)].index(grid.cells[side].cell_id) for r in range(runs)]
    )


def run_values(
    rng: np.random.Generator, case: str, truth: float, between: float, runs: int, trials: int = TRIALS
) -> list[np.ndarray]:
    """(trials, runs) per-run values of each side: one side of median pair ratios (paired) or the eager
    and compiled cells' median steps (10 ms and 10 / truth), each run's median from its own steps
    (tests/unit/analysis/test_simulation.py `replicate_samples`), times the case's between-run offset."""
    paired = paired_case(case)
    truths, sizes = ([truth], PAIRS) if paired else ([10.0, 10.0 / truth], STEPS)
    sides = []
    for side, centre in enumerate(truths):
        within = replicate_samples(rng, trials, runs, centre, 0.0, WITHIN, sizes).replicate_medians()
        offset = (rng.standard_t(3, within.size) if case == "t3" else rng.normal(size=within.size)) * between
        apart = rng.random(within.size) < APART_SHARE
        if case == "apart on the ratio" or (case == "apart on one side" and side == 1):
            by = APART_BY * (1 if paired else -1)  # the ratio +10% either way
            offset += np.where(apart, by, 0.0) - median_shift(between, by)
        if case == "drift":  # slower each round, and by half a round's drift for the one run second
            offset += np.tile(DRIFT * (np.arange(runs) + 0.5 * run_second(runs, side)), trials)
        sides.append((within * np.exp(offset)).reshape(trials, runs))
    return sides


def judged(sides: list[np.ndarray], n: int, level: np.ndarray | float) -> tuple:
    """(low, high, centre, run apart named) of the first `n` runs of each trial, as the tables judge a
    cell: the t interval of a paired cell's ratios or Welch's of eager over compiled, at `level`."""
    trials = len(sides[0])
    cell = np.repeat(np.arange(trials), n)
    values = [side[:, :n].ravel() for side in sides]
    logs = [RunLogs.from_values(cell, v, trials) for v in values]
    apart = np.zeros(trials, bool)
    for v in values:
        apart |= runs_apart(cell, v, trials).run >= 0
    if len(sides) == 1:
        low, high = t_interval(logs[0], level)
        return low, high, np.exp(logs[0].mean), apart
    low, high = welch_interval(logs[0], logs[1], level)
    return low, high, np.exp(logs[0].mean - logs[1].mean), apart


def misled(case: str, between: float, runs: int, seed: int = 0) -> tuple[float, float]:
    """(share of cells misled: no run named apart and the 95% interval misses the truth, share with a
    run named apart) of TRIALS cells of `runs` runs."""
    rng = np.random.default_rng([seed, CASES.index(case), int(between * 1e4), runs])
    low, high, _, apart = judged(run_values(rng, case, SPEEDUP, between, runs), runs, 0.95)
    miss = (low > SPEEDUP) | (high < SPEEDUP)
    return float((miss & ~apart).mean()), float(apart.mean())


def auto_false(case: str, between: float, max_repeats: int = 10, seed: int = 0) -> tuple[float, float]:
    """(share decided faster or slower, share refused for a run apart at max_repeats) of TRIALS
    repeats=auto sweeps of a cell whose typical run is 1.00x, each round's interval at `spent_level`
    and `decisions` with the default margin, a run apart blocking a decision (analysis/statistics/
    decision.py)."""
    rng = np.random.default_rng([seed, CASES.index(case), int(between * 1e4), max_repeats, 1])
    sides = run_values(rng, case, 1.0, between, max_repeats)
    reason, apart = np.full(TRIALS, None, dtype=object), np.zeros(TRIALS, bool)
    for n in range(MIN_REPLICATES, max_repeats + 1):
        level = spent_level(np.full(TRIALS, n), np.full(TRIALS, max_repeats))
        low, high, centre, apart = judged(sides, n, level)
        now = decisions(centre, low, high, np.full(TRIALS, n), max_repeats, EQUIVALENCE, apart=apart)
        going = pd.isna(reason)
        reason[going] = now[going]
    return float(np.isin(reason, [FASTER, SLOWER]).mean()), float(apart.mean())


@pytest.mark.parametrize("runs", (3, 5, 10))
@pytest.mark.parametrize("between", BETWEEN)
@pytest.mark.parametrize("case", CASES)
def test_an_interval_covers_the_typical_run_or_names_a_run_apart(
    case: str, between: float, runs: int
) -> None:
    """At most 10% of cells get an interval that misses the typical run with no run named apart."""
    share, _ = misled(case, between, runs)
    assert share <= _bound(MOST_MISLED), share


@pytest.mark.parametrize("between", BETWEEN)
@pytest.mark.parametrize("case", CASES)
def test_repeats_auto_rarely_decides_a_typical_run_of_one_faster_or_slower(case: str, between: float) -> None:
    share, _ = auto_false(case, between)
    assert share <= _bound(MOST_FALSE), share


def test_a_drift_favours_neither_side_over_two_rounds() -> None:
    """A host 1% slower each round, 1% between runs, 10 runs a side: the mean over TRIALS cells of the
    log speedup is the truth's within 3 standard errors (0.03%); the side run second in every round
    would lag half a round's drift (0.5%)."""
    rng = np.random.default_rng(12)
    _, _, centre, _ = judged(run_values(rng, "drift", SPEEDUP, 0.01, 10), 10, 0.95)
    logs = np.log(centre)
    assert abs(logs.mean() - math.log(SPEEDUP)) <= 3 * logs.std() / math.sqrt(TRIALS)


def test_the_side_that_runs_first_pays_nothing_in_the_pair_ratio() -> None:
    """A side 2% slower when it runs first in its pair, 20 pairs a run in the order a paired cell runs
    them (workloads/cell/paired.py `pair_sides`), 3 runs, 1% within: the runs' median ratio's 95%
    interval covers the truth in at least 90% of TRIALS cells (it would miss by 2% in a fixed order)."""
    rng = np.random.default_rng(13)
    pairs, runs = 20, 3
    first = np.array(
        [[next(order)[0] == COMPILED_SIDE for order in [pair_sides(c, r)] for _ in range(pairs)]
         for c in range(TRIALS) for r in range(runs)]
    )  # fmt: skip
    ratio = SPEEDUP * np.exp(rng.normal(0, WITHIN, first.shape) + np.where(first, -0.02, 0.02))
    cell = np.repeat(np.arange(TRIALS), runs)
    low, high = t_interval(RunLogs.from_values(cell, np.median(ratio, axis=1), TRIALS))
    assert ((low <= SPEEDUP) & (SPEEDUP <= high)).mean() >= 1 - _bound(MOST_MISLED)


def test_a_clean_cell_names_a_run_apart_rarely() -> None:
    """On normal runs (any spread: the rule is scale-free), at most APART_ALPHA of cells name a run
    apart, 20,000 cells per N (binomial SE 0.0007 at 1%)."""
    rng = np.random.default_rng(7)
    cells = 20_000
    for runs in (4, 5, 7, 10, 20):
        values = np.exp(rng.normal(0, 0.02, cells * runs))
        named = runs_apart(np.repeat(np.arange(cells), runs), values, cells).run >= 0
        assert named.mean() <= APART_ALPHA + 3 * math.sqrt(APART_ALPHA / cells), (runs, named.mean())


def test_a_run_ten_percent_apart_among_ten_is_named() -> None:
    """Run 4 of 10 at +10% beside 1% between runs: named in at least 90% of 20,000 cells (95% measured,
    SE 0.002), and 10% off."""
    rng = np.random.default_rng(8)
    cells, runs = 20_000, 10
    values = np.exp(rng.normal(0, 0.01, (cells, runs)))
    values[:, 3] *= 1.1
    found = runs_apart(np.repeat(np.arange(cells), runs), values.ravel(), cells)
    assert (found.run == 3).mean() >= 0.90
    assert np.nanmedian(found.offset) == pytest.approx(0.1, abs=0.005)


def shared_eager_sweeps(between: float, max_repeats: int = 10, seed: int = 0) -> tuple[np.ndarray, ...]:
    """TRIALS repeats=auto sweeps of two compiled cells (1.00x and 1.03x) sharing one eager cell, run
    as the rounds run them (the eager cell goes on while either compiled cell does): (stop reason,
    runs of the eager cell at each stop, the verdict the table prints of each compiled cell, judged
    through analysis/cells/uncertainty.py `draws_ratio_interval` on the eager cell's runs at its
    stop, and the verdict against every eager run, as before the stop record kept them)."""
    rng = np.random.default_rng([seed, int(between * 1e4), max_repeats])
    sides = [
        replicate_samples(rng, TRIALS, max_repeats, truth, between, WITHIN, STEPS).replicate_medians()
        for truth in (10.0, 10.0, 10 / 1.03)
    ]
    runs = [side.reshape(TRIALS, max_repeats) for side in sides]
    reason = np.full((2, TRIALS), None, dtype=object)
    stopped_at = np.full((2, TRIALS), max_repeats)
    for n in range(MIN_REPLICATES, max_repeats + 1):
        level = spent_level(np.full(TRIALS, n), np.full(TRIALS, max_repeats))
        for k in (0, 1):
            low, high, centre, apart = judged([runs[0], runs[k + 1]], n, level)
            now = decisions(centre, low, high, np.full(TRIALS, n), max_repeats, EQUIVALENCE, apart=apart)
            going = pd.isna(reason[k])
            reason[k, going], stopped_at[k, going & pd.notna(now)] = now[going], n
    printed = [_table_verdicts(runs, stopped_at, limit) for limit in (True, False)]
    return reason, *printed


def _table_verdicts(runs: list[np.ndarray], stopped_at: np.ndarray, limit: bool) -> np.ndarray:
    """(2, TRIALS) verdicts of the compiled cells as the per-cell table draws them: a sweep of 3 cells
    per trial (eager, compiled, compiled) as their runs, each compiled cell judged on its runs at its
    stop against the eager cell's first as many (`limit`: its stop record's `against`) or all of the
    eager cell's runs, which ran on while either compiled cell did."""
    eager_runs = stopped_at.max(axis=0)
    counts = np.stack([eager_runs, *stopped_at], axis=1).ravel()  # (TRIALS * 3) cells
    values = np.concatenate([runs[c % 3][c // 3, : counts[c]] for c in range(3 * TRIALS)])
    steps = SortedSamples(values, np.arange(len(values)), np.ones(len(values), np.int64))
    replicas = ReplicateSamples(
        steps, np.repeat(np.arange(3 * TRIALS), counts), np.cumsum(counts) - counts, counts
    )
    level = spent_level(np.maximum(counts, MIN_REPLICATES), runs[0].shape[1])
    cells = pd.DataFrame({"cell_id": [f"c{c}" for c in range(3 * TRIALS)]})
    base = np.repeat(np.arange(TRIALS) * 3, 3)
    against = np.where(np.arange(3 * TRIALS) % 3 == 0, np.inf, counts) if limit else None
    draws = Draws(cells, replicas, 1, 0, level)
    low, high = draws_ratio_interval(draws, "median", base, np.ones(3 * TRIALS, bool), limit=against)
    return equivalence_verdict(low, high, EQUIVALENCE).reshape(TRIALS, 3)[:, 1:].T


def differing(reason: np.ndarray, printed: np.ndarray) -> float:
    """The share of compiled cells decided (faster, slower, no difference) whose printed verdict is
    another."""
    decided = np.char.startswith(reason.astype(str), "decided: ")
    said = np.char.replace(reason.astype(str), "decided: ", "")
    return float((decided & (said != printed.astype(str))).mean())


@pytest.mark.parametrize("between", BETWEEN)
def test_a_shared_eager_cell_prints_the_verdict_each_cell_stopped_on(between: float) -> None:
    """Two compiled cells, one eager cell, up to 10 rounds: every decided cell's printed verdict is its
    stop reason; against every eager run (before the stop record kept them) some differ, and together
    the two cells decide faster or slower falsely (the 1.00x one) in at most 5%."""
    reason, kept, every = shared_eager_sweeps(between)
    assert differing(reason, kept) == 0.0
    assert differing(reason, every) > 0.0
    assert np.isin(reason[0], [FASTER, SLOWER]).mean() <= _bound(MOST_FALSE)


def main() -> None:
    print("| case | between | misled, named apart at 3 runs | 5 runs | 10 runs | false with repeats=auto |")
    print("| --- | ---: | --- | --- | --- | ---: |")
    for case in CASES:
        for between in BETWEEN:
            shares = [misled(case, between, runs) for runs in (3, 5, 10)]
            false, _ = auto_false(case, between)
            text = " | ".join(f"{m:.3f}, {r:.0%}" for m, r in shares)
            print(f"| {case} | {between:.0%} | {text} | {false:.3f} |")
    for between in BETWEEN:
        reason, kept, every = shared_eager_sweeps(between)
        print(
            f"shared eager, {between:.0%} between: printed differs from the stop in "
            f"{differing(reason, kept):.4f} (against every eager run: {differing(reason, every):.4f}); "
            f"false at 1.00x {np.isin(reason[0], [FASTER, SLOWER]).mean():.3f}"
        )


if __name__ == "__main__":
    main()
