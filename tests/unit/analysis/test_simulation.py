"""Simulated sweeps of known truth through the functions the tables and repeats=auto use (issue 38):
the intervals over runs cover the true value (`coverage`), and repeats=auto's stop rule reads a cell
with no difference as faster or slower in at most 5% of sweeps however many rounds it looks
(`auto_sweeps`). Fixed seeds; every trial is one cell of one vectorised call.

`python tests/unit/analysis/test_simulation.py` prints the tables of docs/measurement.md ("Intervals",
"Stopping"); `--rho 1 2 3` compares spending functions.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

if __name__ == "__main__":  # run as a script from anywhere
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from analysis.cells.device_time import device_columns
from analysis.reading.collect import DEVICE_READ, REPEAT, SweepData
from analysis.statistics.decision import (
    FASTER,
    MAX_REACHED,
    MIN_REPLICATES,
    NO_DIFFERENCE,
    RHO,
    SLOWER,
    decisions,
    spent_level,
)
from analysis.statistics.intervals import RunLogs, t_interval, welch_interval, welch_product_interval
from tests.helpers.simulated_runs import PAIRS, STEPS, replicate_samples, skewed
from workloads.contract.vocabulary import COMPLETED, EQUIVALENCE

#: Trials per case (cells, or sweeps), and the grid of issue 38: runs, between-run log sd, within-run
#: step noise.
TRIALS = 2000
RUNS = (2, 3, 5, 10)
BETWEEN = (0.0, 0.01, 0.03)
WITHIN = (0.01, 0.05)
#: The least coverage of a nominal 95% interval that issue 38 accepts; the most: the t interval is exact
#: for normal log values (95% + 3 binomial SE of TRIALS, 0.0049); Welch's errs wide at 2 runs a cell (its
#: degrees of freedom an estimate: 0.979 measured for two cells, 0.9875 for four), and 1.5x wider
#: intervals cover 0.964-0.998 (issue 50 item 4).
LEAST_COVERAGE = 0.93
MOST_COVERAGE = {"t": 0.95 + 3 * math.sqrt(0.95 * 0.05 / TRIALS), "welch": 0.99}


def coverage(
    runs: int, between: float, within: float, seed: int = 0, trials: int = TRIALS
) -> dict[str, float]:
    """Share of `trials` cells whose 95% interval covers the truth: a cell's median step (10 ms,
    t interval), a paired speedup of 1.3x (t interval of the runs' median pair ratios), an unpaired
    speedup of 1.3x (Welch, eager cell over compiled cell), and that speedup's change in an environment
    whose eager step is 1.1x quicker (Welch over the four cells): the calls analysis/cells/metrics.py,
    analysis/cells/paired.py and analysis/studies/versions.py make."""
    rng = np.random.default_rng([seed, runs, int(between * 1e4), int(within * 1e4)])
    eager = replicate_samples(rng, trials, runs, 10.0, between, within, STEPS)
    compiled = replicate_samples(rng, trials, runs, 10.0 / 1.3, between, within, STEPS)
    ratios = replicate_samples(rng, trials, runs, 1.3, between, within, PAIRS)
    # The same workload in a newer environment: eager 1.1x quicker, compiled as before, so its speedup is
    # 1.3 / 1.1 of the older one's (analysis/studies/versions.py's change of speedup, four cells).
    newer_eager = replicate_samples(rng, trials, runs, 10.0 / 1.1, between, within, STEPS)
    newer_compiled = replicate_samples(rng, trials, runs, 10.0 / 1.3, between, within, STEPS)
    logs = {
        name: RunLogs.of(s, s.replicate_medians())
        for name, s in (
            ("e", eager), ("c", compiled), ("p", ratios), ("e2", newer_eager), ("c2", newer_compiled)
        )
    }  # fmt: skip
    covers = lambda interval, truth: float(np.mean((interval[0] <= truth) & (truth <= interval[1])))  # noqa: E731
    return {
        "median step": covers(t_interval(logs["e"]), 10.0),
        "paired speedup": covers(t_interval(logs["p"]), 1.3),
        "unpaired speedup": covers(welch_interval(logs["e"], logs["c"]), 1.3),
        "speedup, newer / older environment": covers(
            welch_product_interval([logs["e2"], logs["c"]], [logs["c2"], logs["e"]]), 1 / 1.1
        ),
    }


CASES = [(n, b, w) for n in RUNS for b in BETWEEN for w in WITHIN]


@pytest.mark.parametrize("runs,between,within", CASES)
def test_intervals_over_runs_cover_the_truth(runs: int, between: float, within: float) -> None:
    """Issue 38 item 1: at least 93% coverage at N = 2, 3, 5, 10 runs, 0-3% between runs, 1-5% within,
    2,000 cells per case; and not much more (MOST_COVERAGE): an interval too wide decides too late."""
    for statistic, share in coverage(runs, between, within).items():
        most = MOST_COVERAGE["t" if statistic in ("median step", "paired speedup") else "welch"]
        assert LEAST_COVERAGE <= share <= most, (statistic, share)


#: Profiled windows per side (the workload's default) and their spread within one process: GPU time per
#: step moves 0.3% or less between processes on one H100 (issue 39), 2% for a margin.
WINDOWS, WINDOW_SPREAD = 3, (0.003, 0.02)


def device_window_coverage(within: float, seed: int = 0, trials: int = TRIALS) -> float:
    """Share of `trials` one-run paired cells whose device-time speedup interval covers its truth
    (1.3x): each side's WINDOWS windows of GPU ms with skewed log noise `within`, through
    analysis/cells/device_time.py `device_columns` (Welch over the two sides' windows)."""
    rng = np.random.default_rng([seed, int(within * 1e4)])
    eager, compiled = (
        truth * np.exp(within * skewed(rng, trials * WINDOWS)).reshape(trials, WINDOWS)
        for truth in (10.0, 10 / 1.3)
    )
    ids = [f"cell{i}" for i in range(trials)]
    runs = pd.DataFrame({column: np.nan for column in DEVICE_READ}, index=range(trials)).assign(
        cell_id=ids, status=COMPLETED, gpu_ms_per_step=np.median(compiled, axis=1),
        eager_gpu_ms_per_step=np.median(eager, axis=1), gpu_ms_windows=list(compiled),
        eager_gpu_ms_windows=list(eager), **{REPEAT: 0},
    )  # fmt: skip
    cells = pd.DataFrame({"cell_id": ids, "status": COMPLETED, "median_step_ms": 10.0, "data_bound": False})
    every = np.ones(trials, bool)
    columns = device_columns(
        cells,
        SweepData(cells, pd.DataFrame(), replicates=runs),
        every,
        np.full(trials, -1),
        np.full(trials, 0.95),
    )
    return float(((columns["device_speedup_low"] <= 1.3) & (1.3 <= columns["device_speedup_high"])).mean())


@pytest.mark.parametrize("within", WINDOW_SPREAD)
def test_a_one_run_device_speedup_interval_covers_the_truth(within: float) -> None:
    """Issue 39: one run's device-time speedup interval, Welch over 3 windows a side, at least 93%."""
    assert device_window_coverage(within) >= LEAST_COVERAGE


def auto_sweeps(
    speedup: float,
    between: float,
    within: float,
    paired: bool,
    max_repeats: int = 10,
    rho: float = RHO,
    seed: int = 0,
    trials: int = TRIALS,
    margin: float = EQUIVALENCE,
) -> tuple[np.ndarray, np.ndarray]:
    """(stop reason, replicates at the stop) of `trials` repeats=auto sweeps of one compiled cell of
    true `speedup`: paired (its runs' median pair ratios, t interval) or against its eager cell, which
    runs as many rounds (Welch). After each round from MIN_REPLICATES on, the interval at
    `spent_level` and `decisions` with `margin`, as analysis/statistics/decision.py."""
    rng = np.random.default_rng([seed, int(speedup * 1e4), int(between * 1e4), int(within * 1e4), paired])
    if paired:
        sides = [replicate_samples(rng, trials, max_repeats, speedup, between, within, PAIRS)]
    else:
        sides = [
            replicate_samples(rng, trials, max_repeats, t, between, within, STEPS)
            for t in (10.0, 10 / speedup)
        ]
    values = [side.replicate_medians().reshape(trials, max_repeats) for side in sides]
    reason = np.full(trials, None, dtype=object)
    stopped_at = np.full(trials, max_repeats)
    cell = np.repeat(np.arange(trials), max_repeats)
    for n in range(MIN_REPLICATES, max_repeats + 1):
        going = reason == None  # noqa: E711
        first = np.tile(np.arange(max_repeats) < n, trials)
        logs = [RunLogs.from_values(cell[first], v.ravel()[first], trials) for v in values]
        level = spent_level(np.full(trials, n), np.full(trials, max_repeats), rho)
        low, high = t_interval(logs[0], level) if paired else welch_interval(logs[0], logs[1], level)
        centre = np.exp(logs[0].mean - (0 if paired else logs[1].mean))
        now = decisions(centre, low, high, np.full(trials, n), max_repeats, margin)
        reason[going] = now[going]
        stopped_at[going & (now != None)] = n  # noqa: E711
    return reason, stopped_at


SPREADS = [(b, w) for b in BETWEEN for w in WITHIN]


@pytest.mark.parametrize("between,within", SPREADS)
@pytest.mark.parametrize("paired", [True, False], ids=["paired", "unpaired"])
def test_repeats_auto_rarely_calls_no_difference_faster_or_slower(
    between: float, within: float, paired: bool
) -> None:
    """Issue 38 item 2: true speedup 1, up to 10 rounds, 2,000 sweeps per case: faster or slower in
    at most 5% of sweeps plus 3 Monte-Carlo standard errors, and never before 3 replicates."""
    reason, stopped_at = auto_sweeps(1.0, between, within, paired)
    false = np.isin(reason, [FASTER, SLOWER]).mean()
    assert false <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / TRIALS), false
    assert stopped_at.min() >= MIN_REPLICATES and set(reason) <= {FASTER, SLOWER, NO_DIFFERENCE, MAX_REACHED}


def test_one_look_without_a_margin_reads_faster_or_slower_in_alpha_of_sweeps() -> None:
    """max_repeats 3 (one look, at 3 runs) and margin 0: the stop rule's t interval is exact for normal
    runs, so a true 1.00x reads faster or slower in 5% of 8,000 paired sweeps (the error the docs
    promise, not the module's ALPHA), within 3 binomial SE (0.0024): a doubled ALPHA, z for t or a
    wider interval moves it out."""
    trials = 8000
    reason, _ = auto_sweeps(1.0, 0.01, 0.01, True, max_repeats=3, trials=trials, margin=0.0, seed=5)
    false = np.isin(reason, [FASTER, SLOWER]).mean()
    assert abs(false - 0.05) <= 3 * math.sqrt(0.05 * 0.95 / trials), false


def test_spent_levels_sum_to_the_error_and_spend_nothing_before_three_runs() -> None:
    """The alpha spent at looks 3..max_repeats adds up to 5%, each look's below it; no look before 3."""
    for most in (3, 4, 10, 25):
        spent = 1 - spent_level(np.arange(MIN_REPLICATES, most + 1), most)
        assert spent.sum() == pytest.approx(0.05) and (spent > 0).all() and (spent <= 0.05 + 1e-12).all()
    assert spent_level(2, 10) == 0.95 and spent_level(3, 3) == pytest.approx(0.95)


def power(
    speedup: float, between: float, within: float, paired: bool, rho: float = RHO
) -> tuple[float, float, float]:
    """(median replicates at the stop, share decided faster, share stopped by max_repeats)."""
    reason, stopped_at = auto_sweeps(speedup, between, within, paired, rho=rho, trials=TRIALS)
    return (
        float(np.median(stopped_at)),
        float((reason == FASTER).mean()),
        float((reason == MAX_REACHED).mean()),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rho", type=float, nargs="*", default=[RHO])
    parser.add_argument("--skip-coverage", action="store_true")
    args = parser.parse_args()
    if not args.skip_coverage:
        print("| runs | between | within | median step | paired speedup | unpaired speedup |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: |")
        for runs, between, within in CASES:
            shares = coverage(runs, between, within).values()
            print(
                f"| {runs} | {between:.0%} | {within:.0%} | " + " | ".join(f"{s:.3f}" for s in shares) + " |"
            )
    for rho in args.rho:
        print(
            f"\nrho = {rho}: false faster/slower at 1.00x; 1.05x and 1.10x: median runs, decided faster, "
            "max_repeats reached"
        )
        print("| side | between | within | false at 1.00x | 1.05x | 1.10x |")
        print("| --- | ---: | ---: | ---: | --- | --- |")
        for paired in (True, False):
            for between, within in SPREADS:
                reason, _ = auto_sweeps(1.0, between, within, paired, rho=rho)
                false = np.isin(reason, [FASTER, SLOWER]).mean()
                cells = [power(s, between, within, paired, rho) for s in (1.05, 1.10)]
                text = [f"{m:.0f} runs, {f:.0%} faster, {x:.0%} max" for m, f, x in cells]
                side = "paired" if paired else "unpaired"
                print(f"| {side} | {between:.0%} | {within:.0%} | {false:.3f} | {text[0]} | {text[1]} |")


if __name__ == "__main__":
    main()
