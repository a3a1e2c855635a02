"""Cells run as several replicates (`repeats`, one process each) are one cell in every table, with
intervals over replicates and steps; end-to-end throughput beside the median step, data-bound cells
judged on it; verdicts with a margin of practical equivalence (issue 11). Sweeps are written through
the project's writers (tests/helpers/analysis_sweeps.py)."""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
from scipy import stats

from analysis.cells.loaded import open_sweep
from analysis.cells.metrics import cell_metrics
from analysis.cells.uncertainty import RESAMPLES, SEED
from analysis.reading.collect import load_sweep
from analysis.rendering.text import markdown
from analysis.statistics.bootstrap import (
    EXACT_MEAN_STEPS,
    ReplicateSamples,
    SortedSamples,
    hierarchical_means,
    percentile_interval,
    stable_hash,
)
from analysis.statistics.verdicts import E2E_BASIS, MEDIAN_BASIS, equivalence_verdict
from analysis.studies.seminar.claims import AGREES, DISAGREES, NO_DIFFERENCE, check_claims, claims_table
from analysis.studies.sweep.table import summary_table
from orchestrator.cli.main import main
from tests.helpers.analysis_sweeps import (
    GPT2,
    ITEMS,
    WARMUP_MS,
    metrics_of,
    write_cell,
    write_ranks_cell,
    write_replicates,
)
from workloads.contract.schema import write_parquet_atomic


def noisy(median: float, n: int, seed: int, noise: float = 0.001) -> list[float]:
    return list(median * (1 + noise * np.random.default_rng(seed).standard_normal(n)))


def lognormal(median: float, n: int, seed: int, sigma: float = 0.05) -> list[float]:
    return list(np.random.default_rng(seed).lognormal(np.log(median), sigma, n))


def samples(replicates: list[list[float]]) -> ReplicateSamples:
    """One cell's replicates as the statistics see them."""
    rows = [(r, v) for r, steps in enumerate(replicates) for v in steps]
    replicate, values = (np.array(column) for column in zip(*rows))
    return ReplicateSamples.from_steps(np.zeros(len(values), np.int64), replicate, values.astype(float), 1)


def geometric(values: list[float]) -> float:
    return float(np.exp(np.mean(np.log(values))))


def welch_by_hand(top: list[float], bottom: list[float]) -> tuple[float, float]:
    """Welch's 95% interval of geometric(top) / geometric(bottom), one value per run, by the textbook
    formulas (Welch-Satterthwaite degrees of freedom)."""
    a, b = np.log(top), np.log(bottom)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = float(stats.t.ppf(0.975, df)) * math.sqrt(va + vb)
    return math.exp(a.mean() - b.mean() - half), math.exp(a.mean() - b.mean() + half)


def generator(cell_id: str, *stream: int) -> list[np.random.Generator]:
    """The generator analysis.cells.metrics seeds for a cell (the median's; stream 2: the mean's)."""
    return [np.random.default_rng([SEED, stable_hash(cell_id), *stream])]


def test_replicates_are_one_row_with_the_geometric_mean_of_their_medians(tmp_path: Path) -> None:
    runs = [[10.0, 11.0, 12.0], [20.0, 21.0, 22.0, 23.0], [14.0, 15.0, 16.0]]
    write_replicates(tmp_path, "e", "eager", runs)
    data = load_sweep(tmp_path, warn=None)
    assert len(data.replicates) == 3 and sorted(data.steps["repeat"].unique()) == [0, 1, 2]
    metrics = cell_metrics(data)
    assert list(metrics["cell_id"]) == ["e"]
    row = metrics.iloc[0]
    medians = [11.0, 21.5, 15.0]
    pooled = np.concatenate(runs)
    assert (row["replicates"], row["measured_steps"]) == (3, 10)
    centre = geometric(medians)
    assert row["median_step_ms"] == pytest.approx(centre) and row["items_per_s"] == pytest.approx(
        ITEMS / centre * 1e3
    )
    assert row["mean_step_ms"] == pytest.approx(pooled.mean())
    assert row["std_step_ms"] == pytest.approx(pooled.std(ddof=1))
    assert row["replicate_spread"] == pytest.approx(np.std(medians, ddof=1) / np.mean(medians))
    # End to end: each replicate's items over its span, the geometric mean over the replicates.
    assert row["e2e_items_per_s"] == pytest.approx(geometric([ITEMS * len(r) / (sum(r) / 1e3) for r in runs]))
    text = summary_table(metrics).text.iloc[0]
    # (runs at 11, 21.5 and 15 ms whose steps vary by 1 ms disagree beyond their own intervals)
    assert (
        text["runs"] == f"3 ±{100 * row['replicate_spread']:.1f}% unstable" and text["median ms"] == "15.25"
    )


def test_the_table_reports_welch_intervals_over_runs(tmp_path: Path) -> None:
    """Both cells with several runs: the speedup and end-to-end intervals are Welch's over the runs'
    median steps and 1 / mean steps, by hand; the runs' spread makes them wider than the steps'."""
    eager = [lognormal(m, 40, seed=i) for i, m in enumerate((10.0, 10.4, 9.8))]
    compiled = [lognormal(m, 30, seed=10 + i) for i, m in enumerate((8.0, 8.6, 8.1, 7.7))]
    write_replicates(tmp_path, "e", "eager", eager)
    write_replicates(tmp_path, "i", "inductor", compiled)
    row = metrics_of(tmp_path)["i"]
    low, high = welch_by_hand([np.median(r) for r in eager], [np.median(r) for r in compiled])
    assert (row["speedup_low"], row["speedup_high"]) == (pytest.approx(low), pytest.approx(high))
    assert row["speedup"] == pytest.approx(
        geometric([np.median(r) for r in eager]) / geometric([np.median(r) for r in compiled])
    )
    low, high = welch_by_hand([1 / np.mean(r) for r in compiled], [1 / np.mean(r) for r in eager])
    assert (row["e2e_speedup_low"], row["e2e_speedup_high"]) == (pytest.approx(low), pytest.approx(high))
    assert row["interval"] == "across 4 runs" and row["interval_level"] == 0.95
    assert row["verdict"] == "faster" and row["verdict_basis"] == MEDIAN_BASIS
    # The one-level interval of the pooled steps, which ignored the spread between runs, is narrower.
    pooled = [
        SortedSamples.from_groups(np.zeros(sum(map(len, runs)), int), np.concatenate(runs), 1)
        for runs in (eager, compiled)
    ]
    one_level = percentile_interval(
        pooled[0].bootstrap_medians(RESAMPLES, generator("e"))
        / pooled[1].bootstrap_medians(RESAMPLES, generator("i"))
    )
    assert row["speedup_high"] - row["speedup_low"] > 1.5 * (one_level[1][0] - one_level[0][0])


def test_one_replicate_keeps_the_one_level_interval(tmp_path: Path) -> None:
    eager, compiled = lognormal(10.0, 25, seed=1), lognormal(8.0, 30, seed=2)
    write_cell(tmp_path, "e", "eager", step_ms=eager)
    write_cell(tmp_path, "i", "inductor", step_ms=compiled)
    row = metrics_of(tmp_path)["i"]
    one = lambda steps, cell: SortedSamples.from_groups(  # noqa: E731
        np.zeros(len(steps), int), np.array(steps), 1
    ).bootstrap_medians(RESAMPLES, generator(cell))
    low, high = percentile_interval(one(eager, "e") / one(compiled, "i"))
    assert (row["speedup_low"], row["speedup_high"]) == (low[0], high[0])
    assert row["replicates"] == 1 and math.isnan(row["replicate_spread"]) and not row["unstable"]


def test_scaling_intervals_are_over_replicates_too(tmp_path: Path) -> None:
    write_ranks_cell(tmp_path, "one", "eager", [noisy(100.0, 20, seed=1)], repeat=0)
    write_ranks_cell(tmp_path, "one", "eager", [noisy(104.0, 20, seed=2)], repeat=1)
    two = [
        [noisy(125.0, 20, seed=3), noisy(124.0, 20, seed=4)],
        [noisy(118.0, 20, seed=5), noisy(117.0, 20, seed=6)],
    ]
    for repeat, ranks in enumerate(two):
        write_ranks_cell(tmp_path, "two", "eager", ranks, repeat=repeat)
    row = metrics_of(tmp_path)["two"]
    assert row["replicates"] == 2 and row["scaling_baseline_cell_id"] == "one"
    steps = load_sweep(tmp_path, warn=None).steps
    measured = steps[steps["phase"] == "measure"]
    replicas = {
        cell: samples(
            [list(run["step_time_ms"]) for _, run in measured[measured["cell_id"] == cell].groupby("repeat")]
        )
        for cell in ("one", "two")
    }
    medians = {cell: replicas[cell].replicate_medians() for cell in replicas}
    low, high = welch_by_hand(list(medians["one"]), list(medians["two"]))
    assert (row["scaling_speedup_low"], row["scaling_speedup_high"]) == (
        pytest.approx(2 * low),
        pytest.approx(2 * high),
    )
    assert row["scaling_efficiency_low"] == pytest.approx(low)


def test_replicates_that_disagree_are_unstable(tmp_path: Path) -> None:
    """Runs at 12 and 15 ms, 0.1% noise inside each: their own intervals are far apart. Three runs
    drawn from one law are not, nor are 12 and 15 ms within a tolerance of 30%."""
    write_replicates(tmp_path, "shifted", "eager", [noisy(12.0, 200, seed=1), noisy(15.0, 200, seed=2)])
    write_replicates(
        tmp_path, "steady", "eager", [lognormal(12.0, 200, seed=s) for s in (3, 4, 5)], precision="fp32"
    )
    rows = metrics_of(tmp_path)
    assert rows["shifted"]["unstable"] and not rows["steady"]["unstable"]
    assert rows["shifted"]["replicate_spread"] == pytest.approx(np.std([12, 15], ddof=1) / 13.5, rel=0.01)
    assert rows["shifted"]["median_step_ms"] == pytest.approx(13.5, rel=0.01)  # the two runs' medians' mean
    text = summary_table(cell_metrics(load_sweep(tmp_path, warn=None))).text.set_index("cell")
    assert text.loc["shifted", "runs"].endswith(" unstable") and text.loc["shifted", "runs"].startswith("2 ±")
    assert not text.loc["steady", "runs"].endswith("unstable")
    assert not metrics_of(tmp_path, equivalence=0.3)["shifted"]["unstable"]  # the margin is the tolerance


def data_bound_steps(
    fast: float, mean: float, fast_wait: float, share: float
) -> tuple[list[float], list[float]]:
    """20 measured steps: 18 at `fast` ms, 2 long ones that bring the mean to `mean` ms, and waits for
    data of `fast_wait` ms in the fast steps and the rest of `share` x the span in the long ones."""
    slow = (20 * mean - 18 * fast) / 2
    wait = (share * 20 * mean - 18 * fast_wait) / 2
    steps = [fast] * 9 + [slow] + [fast] * 9 + [slow]
    waits = [fast_wait] * 9 + [wait] + [fast_wait] * 9 + [wait]
    return steps, waits


def test_a_data_bound_cell_is_judged_end_to_end(tmp_path: Path) -> None:
    """The issue's cell: median step 16.9 ms, mean 162.7 ms, 94% of the time waiting for data. Its
    end-to-end throughput is items / 0.1627 s, not items / 0.0169 s; a compiled cell with faster
    steps (12 ms) but the same waits is 1.41x by the median step, 1.03x end to end."""
    eager, eager_wait = data_bound_steps(16.9, 162.7, 15.0, 0.94)
    compiled, compiled_wait = data_bound_steps(12.0, 162.7 / 1.03, 10.1, 0.95)
    flops_over_peak = 0.4 * 16.9  # MFU of a step = FLOPs / (peak x its time): 40% at 16.9 ms
    mfu = [flops_over_peak / t for t in [*WARMUP_MS, *eager]]
    write_cell(tmp_path, "e", "eager", step_ms=eager, data_ms=[0.0, 0.0, *eager_wait], mfu=mfu)
    write_cell(tmp_path, "i", "inductor", step_ms=compiled, data_ms=[0.0, 0.0, *compiled_wait])
    metrics = cell_metrics(load_sweep(tmp_path, warn=None))
    rows = {row["cell_id"]: row for row in metrics.to_dict("records")}
    base, own = rows["e"], rows["i"]
    assert (base["median_step_ms"], base["mean_step_ms"]) == (pytest.approx(16.9), pytest.approx(162.7))
    assert base["data_wait_share"] == pytest.approx(0.94) and base["data_bound"] and own["data_bound"]
    assert base["items_per_s"] == pytest.approx(ITEMS / 0.0169)
    assert base["e2e_items_per_s"] == pytest.approx(ITEMS / 0.1627)
    assert base["e2e_mfu"] == pytest.approx(flops_over_peak / 162.7) and base["mfu_mean"] > 0.3
    assert own["speedup"] == pytest.approx(16.9 / 12.0) and own["e2e_speedup"] == pytest.approx(1.03)
    assert own["verdict_basis"] == E2E_BASIS
    assert (
        own["verdict"]
        == equivalence_verdict(np.array([own["e2e_speedup_low"]]), np.array([own["e2e_speedup_high"]]))[0]
    )
    assert own["e2e_speedup_low"] < 1.03 < own["e2e_speedup_high"]
    assert pd.isna(base["verdict"]) and pd.isna(base["verdict_basis"])  # the baseline has none
    verdict = summary_table(metrics).text.set_index("cell").loc["i", "verdict"]
    assert verdict.startswith(f"{own['verdict']} — data-bound (95% waiting for data): end-to-end 1.03x [")
    # Above the threshold no more: the median step's interval again.
    assert metrics_of(tmp_path, data_bound=0.96)["i"]["verdict_basis"] == MEDIAN_BASIS


def test_a_data_bound_baseline_makes_the_comparison_end_to_end(tmp_path: Path) -> None:
    eager, eager_wait = data_bound_steps(16.9, 162.7, 15.0, 0.94)
    write_cell(tmp_path, "e", "eager", step_ms=eager, data_ms=[0.0, 0.0, *eager_wait])
    write_cell(tmp_path, "i", "inductor", step_ms=[12.0] * 20, data_ms=[0.0] * 22)
    metrics = cell_metrics(load_sweep(tmp_path, warn=None))
    row = metrics.set_index("cell_id").loc["i"]
    assert not row["data_bound"] and row["verdict_basis"] == E2E_BASIS
    assert row["e2e_speedup"] == pytest.approx(162.7 / 12.0) and row["verdict"] == "faster"
    verdict = summary_table(metrics).text.set_index("cell").loc["i", "verdict"]
    assert verdict.startswith(
        "faster (one run) — eager cell data-bound (94% waiting for data): end-to-end 13.56x"
    )


def test_an_equivalence_margin_makes_a_negligible_difference_no_difference(tmp_path: Path) -> None:
    """0.997x with a tight interval: slower without a margin (and a claim of faster disagrees), no
    difference within 2%, the default margin."""
    write_cell(tmp_path, "gpt2-eager", "eager", step_ms=noisy(10.0, 400, seed=1, noise=0.0005), **GPT2)
    write_cell(
        tmp_path,
        "gpt2-inductor",
        "inductor",
        step_ms=noisy(10.03, 400, seed=2, noise=0.0005),
        compile_mode="default",
        **GPT2,
    )
    data = load_sweep(tmp_path, warn=None)
    plain, margin = cell_metrics(data, equivalence=0.0), cell_metrics(data)
    for metrics, verdict in ((plain, "slower"), (margin, "no difference")):
        row = metrics.set_index("cell_id").loc["gpt2-inductor"]
        assert row["speedup"] == pytest.approx(0.997, abs=5e-4) and row["speedup_high"] < 1
        assert row["verdict"] == verdict
    claim = "inductor is faster than eager for gpt2"
    assert check_claims(plain).set_index("claim").loc[claim, "verdict"] == DISAGREES
    within = check_claims(margin, margin=0.02).set_index("claim").loc[claim]
    assert within["verdict"] == NO_DIFFERENCE
    assert within["ours"].startswith("no difference (within ±2.0%): speedup 0.997x [")
    assert within["ours"].endswith("(1 run: run-to-run noise not covered)")
    assert "within ±2.0% of 1" in claims_table(margin, margin=0.02).note
    assert "within ±2.0% of 1" in summary_table(margin, equivalence=0.02).note


def test_claims_say_how_many_runs_their_interval_covers(tmp_path: Path) -> None:
    write_replicates(
        tmp_path, "gpt2-eager", "eager", [noisy(3000.0, 5, seed=s, noise=0.003) for s in (1, 2, 3)], **GPT2
    )
    write_replicates(
        tmp_path,
        "gpt2-inductor",
        "inductor",
        [noisy(2600.0, 5, seed=s, noise=0.003) for s in (4, 5, 6)],
        compile_mode="default",
        **GPT2,
    )
    claims = check_claims(cell_metrics(load_sweep(tmp_path, warn=None))).set_index("claim")
    gpt2 = claims.loc["inductor is faster than eager for gpt2"]
    assert (
        gpt2["verdict"] == AGREES and gpt2["ours"].endswith(" (3 runs)") and "not covered" not in gpt2["ours"]
    )
    assert (gpt2["replicates"], gpt2["baseline_replicates"]) == (3, 3)
    write_replicates(
        tmp_path / "fewer", "gpt2-eager", "eager", [noisy(3000.0, 5, seed=1, noise=0.003)], **GPT2
    )
    write_replicates(
        tmp_path / "fewer",
        "gpt2-inductor",
        "inductor",
        [noisy(2600.0, 5, seed=s, noise=0.003) for s in (4, 5, 6)],
        compile_mode="default",
        **GPT2,
    )
    fewer = check_claims(cell_metrics(load_sweep(tmp_path / "fewer", warn=None))).set_index("claim")
    assert fewer.loc["inductor is faster than eager for gpt2", "ours"].endswith(
        " (3 vs 1 runs: run-to-run noise not covered)"
    )


def test_analyze_takes_the_margin_and_the_data_bound_threshold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    eager, eager_wait = data_bound_steps(16.9, 162.7, 15.0, 0.94)
    compiled, compiled_wait = data_bound_steps(12.0, 162.7 / 1.03, 10.1, 0.95)
    write_cell(tmp_path, "e", "eager", step_ms=eager, data_ms=[0.0, 0.0, *eager_wait])
    write_cell(tmp_path, "i", "inductor", step_ms=compiled, data_ms=[0.0, 0.0, *compiled_wait])
    write_cell(tmp_path, "e32", "eager", step_ms=noisy(10.0, 400, seed=1, noise=0.0005), precision="fp32")
    write_cell(tmp_path, "i32", "inductor", step_ms=noisy(10.03, 400, seed=2, noise=0.0005), precision="fp32")

    def csv_of(*flags: str) -> pd.DataFrame:
        assert main(["analyze", str(tmp_path), "--format", "csv", "--no-plots", *flags]) == 0
        return pd.read_csv(io.StringIO(capsys.readouterr().out)).set_index("cell_id")

    default = csv_of()
    assert default.loc["i32", "verdict"] == "no difference" and default.loc["i", "verdict_basis"] == E2E_BASIS
    assert bool(default.loc["i", "data_bound"]) and not bool(default.loc["i32", "data_bound"])
    flags = csv_of("--equivalence", "0", "--data-bound", "0.97")
    assert flags.loc["i32", "verdict"] == "slower"
    assert not bool(flags.loc["i", "data_bound"]) and flags.loc["i", "verdict_basis"] == MEDIAN_BASIS
    assert main(["analyze", str(tmp_path), "--no-plots", "--equivalence", "0.02"]) == 0
    assert "within ±2.0% of 1" in capsys.readouterr().out
    for bad in (
        ["--equivalence", "1"],
        ["--equivalence", "-0.1"],
        ["--data-bound", "1.5"],
        ["--data-bound", "x"],
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(["analyze", str(tmp_path), *bad])
        assert exit_info.value.code == 2 and "not a" in capsys.readouterr().err


def test_a_run_file_without_repeat_is_one_replicate(tmp_path: Path) -> None:
    """A run.parquet of schema version 2 (before replicates and the end-to-end columns): one
    replicate, with the same numbers as the cell written now as replicate 0."""
    old, new = tmp_path / "old", tmp_path / "new"
    for sweep, repeat in ((old, None), (new, 0)):
        write_cell(sweep, "e", "eager", status="failed", step_ms=[99.0], attempt=1, repeat=repeat)
        write_cell(
            sweep,
            "e",
            "eager",
            step_ms=lognormal(10.0, 20, seed=1),
            attempt=2,
            repeat=repeat,
            data_ms=[0.0] * 22,
        )
        write_cell(sweep, "i", "inductor", step_ms=lognormal(8.0, 20, seed=2), repeat=repeat)
    for cell in ("e", "i"):
        path = old / "cells" / cell / "run.parquet"
        v2 = pq.read_table(path).drop_columns(
            ["repeat", "measured_s", "e2e_items_per_s", "e2e_mfu", "data_wait_s"]
        )
        write_parquet_atomic(v2, path)
        assert "repeat" not in pq.read_schema(path).names
    data = load_sweep(old, warn=None)
    assert list(data.cells.set_index("cell_id").loc[["e", "i"], "replicates"]) == [1, 1]
    assert set(data.steps["repeat"]) == {0} and set(data.steps["attempt"]) == {1, 2}
    assert list(data.replicates["repeat"]) == [0, 0]
    pd.testing.assert_frame_equal(cell_metrics(data), cell_metrics(load_sweep(new, warn=None)))
    row = cell_metrics(data).set_index("cell_id").loc["i"]
    assert row["replicates"] == 1 and row["e2e_items_per_s"] == pytest.approx(
        ITEMS / (row["mean_step_ms"] / 1e3)
    )


def test_per_cell_reads_of_replicates_equal_the_sweep_read(tmp_path: Path) -> None:
    """`compilebench sweep` opens the cells it ran: replicates give the same metrics as a sweep read."""
    write_replicates(tmp_path, "e", "eager", [lognormal(10.0, 20, seed=s) for s in (1, 2)])
    write_replicates(tmp_path, "i", "inductor", [lognormal(7.0, 20, seed=s) for s in (3, 4, 5)])
    one_by_one = open_sweep(tmp_path, ["i", "e"], warn=None).metrics
    pd.testing.assert_frame_equal(
        one_by_one, cell_metrics(load_sweep(tmp_path, warn=None)), check_dtype=False
    )
    assert "| 3 ±" in markdown(summary_table(one_by_one))


def cdf_distance(a: np.ndarray, b: np.ndarray) -> float:
    support = np.union1d(a, b)
    cdf = lambda x: np.searchsorted(np.sort(x), support, side="right") / len(x)  # noqa: E731
    return float(np.abs(cdf(a) - cdf(b)).max())


@pytest.mark.parametrize("sizes", [(7, 4, 9), (150, 220, 180)])
def test_hierarchical_means_have_the_law_of_resampling_replicates_then_steps(sizes: tuple[int, ...]) -> None:
    """Against two-level resampling done the plain way, 20,000 draws each: exact resampling up to
    EXACT_MEAN_STEPS steps, the normal limit above it (right-skewed steps: 5% long waits). Two samples
    of 20,000 from one law are 0.0195 apart in CDF at most with probability 99.9% (Kolmogorov);
    without the level of replicates the distance is above 0.1."""
    draws, rng = 20_000, np.random.default_rng(3)
    reps = [
        np.concatenate([rng.lognormal(np.log(m), 0.1, n - n // 20), rng.uniform(50, 80, n // 20)])
        for m, n in zip((10, 11, 12.5), sizes)
    ]
    fast = hierarchical_means(
        samples([list(r) for r in reps]), draws, [np.random.default_rng(1)], reciprocal=True
    )[0]
    plain_rng = np.random.default_rng(2)
    picks = plain_rng.integers(0, 3, (draws, 3))
    means = np.empty((draws, 3))
    for j, steps in enumerate(reps):
        chosen = picks == j
        means[chosen] = steps[plain_rng.integers(0, len(steps), (chosen.sum(), len(steps)))].mean(axis=1)
    plain = np.median(1 / means, axis=1)
    assert max(sizes) <= EXACT_MEAN_STEPS or min(sizes) > EXACT_MEAN_STEPS  # one path or the other
    assert cdf_distance(fast, plain) < 0.02
    for end, q in zip(percentile_interval(fast[None, :]), (0.025, 0.975)):
        assert abs((plain < end[0]).mean() - q) < 0.01


def test_a_run_that_stands_apart_is_named_and_leaves_the_verdict_undecided(tmp_path: Path) -> None:
    """The committed versions pack's resnet per-run paired ratios, [1.000, 1.003, 1.019, 1.017, 0.876]
    (issue 50), as an unpaired cell's five runs of median steps against a steady eager cell: run 5 is
    named, its median step 15% above the others' (1.0097 / 0.876, their geometric mean over its), and
    the verdict is undecided, in words too."""
    ratios = [1.000, 1.003, 1.019, 1.017, 0.876]
    flat = lambda median: [median] * 21  # noqa: E731
    write_replicates(tmp_path, "e", "eager", [flat(10.0 * (1 + 0.001 * k)) for k in range(5)], **GPT2)
    write_replicates(tmp_path, "i", "inductor", [flat(10.0 / r) for r in ratios], **GPT2)
    row = metrics_of(tmp_path)["i"]
    assert row["runs_apart"] == "run 5 is 15% above the others"
    assert row["verdict"] == "undecided" and pd.isna(metrics_of(tmp_path)["e"]["runs_apart"])
    text = summary_table(open_sweep(tmp_path, warn=None).metrics).text.set_index("cell")
    assert text.loc["i", "verdict"] == "undecided — run 5 is 15% above the others"


def test_a_stopped_cell_is_judged_on_the_eager_runs_it_stopped_on(tmp_path: Path) -> None:
    """A repeats=auto cell stopped at 3 runs (its stop record: `against` 3) beside an eager cell that
    ran 6 for another cell: its interval is Welch's over its 3 runs and the eager cell's first 3, by
    hand (scipy's Welch test on the log medians), not over all 6."""
    eager = [10.0, 10.2, 9.9, 11.5, 11.6, 11.4]  # the later runs slower: they would move the verdict
    compiled = [8.0, 8.1, 7.9]
    write_replicates(tmp_path, "e", "eager", [[m] * 21 for m in eager], **GPT2)
    directory = write_replicates(tmp_path, "i", "inductor", [[m] * 21 for m in compiled], **GPT2)
    config = yaml.safe_load((directory / "config.yaml").read_text())
    (directory / "config.yaml").write_text(yaml.safe_dump({**config, "repeats": "auto", "max_repeats": 3}))
    (directory / "auto_repeats.json").write_text(
        '{"replicates": 3, "reason": "max_repeats reached", "against": 3}'
    )
    row = open_sweep(tmp_path, warn=None).metrics.set_index("cell_id").loc["i"]
    top, bottom = np.log(eager[:3]), np.log(compiled)
    difference = top.mean() - bottom.mean()
    low, high = stats.ttest_ind(top, bottom, equal_var=False).confidence_interval(0.95)
    assert (row["speedup_low"], row["speedup_high"]) == pytest.approx((math.exp(low), math.exp(high)))
    assert math.log(row["speedup_low"]) < difference < math.log(row["speedup_high"])
