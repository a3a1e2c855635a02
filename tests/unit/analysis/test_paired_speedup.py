"""The paired speedup (analysis/cells/paired.py, issue 25): a paired cell's speedup is the median of its
pair ratios (eager block median / compiled block median), median over replicates, with a bootstrap
over replicates, then pairs; the speedup against the eager cell stays beside it, and every table,
the claims, the suite, `compare` and the report use the paired one. Sweeps are written through the
project's writers (tests/helpers/analysis_sweeps.py)."""

from __future__ import annotations

import csv
import io
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.cells.loaded import open_sweep
from analysis.cells.metrics import cell_metrics
from analysis.compare import compare
from analysis.reading.collect import load_sweep, read_cell
from analysis.rendering.text import fmt_speedup
from analysis.report import analyze, write_report
from analysis.studies.seminar.claims import check_claims
from analysis.studies.suite import suite_tables
from analysis.studies.sweep.speedup_texts import DISAGREES
from analysis.studies.sweep.summaries import break_even_table, geomean_table
from analysis.studies.sweep.table import summary_table
from tests.helpers.analysis_sweeps import (
    GPT2,
    metrics_of,
    write_manifest,
    write_paired_replicates,
    write_replicates,
)


def blocks(eager: float, compiled: float, pairs: int, seed: int, k: int = 5) -> list[tuple[list, list]]:
    """`pairs` pairs of k-step blocks, steps lognormal (2%) around the eager and compiled step."""
    rng = np.random.default_rng(seed)
    return [
        (list(rng.lognormal(np.log(eager), 0.02, k)), list(rng.lognormal(np.log(compiled), 0.02, k)))
        for _ in range(pairs)
    ]


def steps(median: float, seed: int, n: int = 60) -> list[float]:
    return list(np.random.default_rng(seed).lognormal(np.log(median), 0.02, n))


def test_pairs_and_the_paired_speedup_by_hand(tmp_path: Path) -> None:
    """Block medians, pair ratios and the geometric mean over replicates of the median ratio, by hand; a
    pair whose eager block is missing (its eager side ran out of memory) is left out, and the eager
    side's steps never enter the cell's own statistics."""
    replicate_0 = [
        ([10.0, 11.0, 12.0], [8.0, 9.0, 7.0]),  # 11 / 8
        ([12.0, 10.0, 14.0], [9.0, 8.0, 8.5]),  # 12 / 8.5
        ([11.0, 11.0, 30.0], [8.0, 100.0, 8.0]),  # 11 / 8: a block's value is its median
        ([], [8.0, 8.0, 8.0]),  # no eager block: no pair
    ]
    replicate_1 = [([20.0, 21.0, 22.0], [10.0, 10.0, 10.0]), ([20.0, 20.0, 20.0], [11.0, 12.0, 13.0])]
    write_paired_replicates(tmp_path, "i", "inductor", [replicate_0, replicate_1], **GPT2)
    write_replicates(tmp_path, "e", "eager", [steps(10.0, 1), steps(10.0, 2)], **GPT2)
    data = load_sweep(tmp_path, warn=None)
    pairs = data.pairs.sort_values(["repeat", "pair"])
    assert pairs[["repeat", "pair", "eager_ms", "compiled_ms"]].values.tolist() == [
        [0, 0, 11.0, 8.0],
        [0, 1, 12.0, 8.5],
        [0, 2, 11.0, 8.0],
        [1, 0, 21.0, 10.0],
        [1, 1, 20.0, 12.0],
    ]
    rows = metrics_of(tmp_path)
    row = rows["i"]
    replicate_ratios = (np.median([11 / 8, 12 / 8.5, 11 / 8]), np.median([21 / 10, 20 / 12]))
    geometric = lambda values: np.exp(np.mean(np.log(values)))  # noqa: E731
    assert row["speedup"] == pytest.approx(geometric(replicate_ratios), rel=1e-12)
    assert (row["speedup_method"], row["pairs"], row["replicates"]) == ("paired", 5, 2)
    compiled = [
        [8.0, 9.0, 7.0, 9.0, 8.0, 8.5, 8.0, 100.0, 8.0, 8.0, 8.0, 8.0],
        [10.0] * 3 + [11.0, 12.0, 13.0],
    ]
    assert row["measured_steps"] == 18
    assert row["median_step_ms"] == pytest.approx(geometric([np.median(c) for c in compiled]))
    assert row["unpaired_speedup"] == pytest.approx(rows["e"]["median_step_ms"] / row["median_step_ms"])


def test_the_paired_interval_over_three_runs_is_the_t_interval_of_their_median_ratios(tmp_path: Path) -> None:
    """Three replicates: the speedup is the geometric mean of the runs' median pair ratios and its
    interval the Student-t one on their logs, by hand with the textbook t_{2, 0.975} = 4.303; one
    replicate alone keeps the bootstrap of its pairs and says so."""
    reps = [blocks(10.0, 8.0, n, seed) for n, seed in ((7, 1), (10, 2), (13, 3))]
    write_paired_replicates(tmp_path / "three", "i", "inductor", reps, **GPT2)
    write_paired_replicates(tmp_path / "one", "i", "inductor", reps[:1], **GPT2)
    row = metrics_of(tmp_path / "three")["i"]
    logs = np.log([np.median([np.median(e) / np.median(c) for e, c in rep]) for rep in reps])
    half = 4.303 * logs.std(ddof=1) / math.sqrt(3)
    assert row["speedup"] == pytest.approx(math.exp(logs.mean()), rel=1e-12)
    assert row["speedup_low"] == pytest.approx(math.exp(logs.mean() - half), rel=1e-4)
    assert row["speedup_high"] == pytest.approx(math.exp(logs.mean() + half), rel=1e-4)
    assert row["interval"] == "across 3 runs"
    alone = metrics_of(tmp_path / "one")["i"]
    assert alone["interval"] == "within one process" and alone["speedup_low"] < alone["speedup_high"]


def slow_host_sweep(root: Path, slower: float) -> Path:
    """An eager cell and a paired inductor cell (1.25x), two replicates each; the compiled cell's
    second process runs on a host `slower` times slower, both of its sides alike (the same noise)."""
    write_replicates(root, "e", "eager", [steps(10.0, seed) for seed in range(2)], **GPT2)
    reps = [blocks(10.0 * speed, 8.0 * speed, 12, seed) for seed, speed in enumerate((1.0, slower), start=10)]
    write_paired_replicates(root, "i", "inductor", reps, **GPT2)
    write_manifest(root, [{"cell_id": c} for c in ("e", "i")])
    return root


def test_a_slower_host_moves_the_unpaired_speedup_not_the_paired_one(tmp_path: Path) -> None:
    """The host 30% slower in one of two processes: the compiled steps of that run are 30% slower and
    the unpaired speedup moves out of the paired interval; the pairs of that run ran on the same slow
    host, so the paired speedup, its interval and its runs' spread are those of a steady host."""
    steady = metrics_of(slow_host_sweep(tmp_path / "steady", 1.0))["i"]
    slow = metrics_of(slow_host_sweep(tmp_path / "slow", 1.3))["i"]
    for column in ("speedup", "speedup_low", "speedup_high", "replicate_spread"):
        assert slow[column] == pytest.approx(steady[column], rel=1e-12), column
    for row in (steady, slow):
        assert row["speedup_method"] == "paired" and row["speedup_low"] < 1.25 < row["speedup_high"]
        assert row["verdict"] == "faster" and not row["unstable"]
    assert steady["speedup_low"] < steady["unpaired_speedup"] < steady["speedup_high"]
    # (8 + 10.4) / 2 ms: the median over two runs of the compiled steps
    assert slow["unpaired_speedup"] < slow["speedup_low"]
    assert slow["unpaired_speedup"] == pytest.approx(10.0 / 9.2, rel=0.02)


def test_disjoint_paired_and_unpaired_intervals_are_flagged_in_the_table(tmp_path: Path) -> None:
    """The eager cell measured on a host 20% faster than the compiled cell's: the unpaired speedup
    (1.0x) and the paired one (1.25x) have disjoint intervals; the table says so, with both."""
    write_replicates(tmp_path, "e", "eager", [steps(8.0, 1)], **GPT2)
    write_paired_replicates(tmp_path, "i", "inductor", [blocks(10.0, 8.0, 12, 2)], **GPT2)
    write_paired_replicates(tmp_path, "a", "aot_eager", [blocks(8.0, 8.0, 12, 3)], **GPT2)
    metrics = cell_metrics(load_sweep(tmp_path, warn=None))
    rows = metrics.set_index("cell_id")
    assert rows.loc["i", "paired_disagrees"] and not rows.loc["a", "paired_disagrees"]
    assert rows.loc["i", "unpaired_speedup_high"] < rows.loc["i", "speedup_low"]
    # a gap within the margin (here 30%, the 25% gap inside it) is no disagreement, as for `unstable`
    lenient = cell_metrics(load_sweep(tmp_path, warn=None), equivalence=0.3).set_index("cell_id")
    assert not lenient.loc["i", "paired_disagrees"]
    # each cell draws from its own generators: read alone, the paired interval is the same
    (alone,) = cell_metrics(read_cell(tmp_path / "cells" / "i", warn=None)).to_dict("records")
    for column in ("speedup", "speedup_low", "speedup_high"):
        assert alone[column] == rows.loc["i", column], column
    table = summary_table(metrics)
    text = table.text.set_index("cell")["vs eager"]
    assert text["e"] == "" and text["a"] == "paired"
    unpaired = rows.loc["i", ["unpaired_speedup", "unpaired_speedup_low", "unpaired_speedup_high"]]
    assert text["i"] == f"paired {DISAGREES} {fmt_speedup(*unpaired)}"
    assert "≠ unpaired" in table.note and "pair ratios" in table.note


def test_a_paired_cell_needs_no_eager_cell_and_a_replicate_that_fell_back_makes_it_unpaired(
    tmp_path: Path,
) -> None:
    """A paired cell alone has its speedup and verdict; a cell one of whose runs went on unpaired
    (run row `paired` false: its eager side ran out of memory) is compared with its eager cell."""
    alone = tmp_path / "alone"
    write_paired_replicates(alone, "i", "inductor", [blocks(10.0, 8.0, 8, 1)], **GPT2)
    row = metrics_of(alone)["i"]
    assert (row["speedup_method"], row["verdict"], row["baseline_cell_id"]) == ("paired", "faster", None)
    assert math.isnan(row["unpaired_speedup"])

    mixed = tmp_path / "mixed"
    write_replicates(mixed, "e", "eager", [steps(10.0, 1), steps(10.0, 2)], **GPT2)
    write_paired_replicates(
        mixed,
        "i",
        "inductor",
        [blocks(12.0, 8.0, 8, 1), blocks(12.0, 8.0, 8, 2)],
        paired=[True, False],
        **GPT2,
    )
    rows = metrics_of(mixed)
    row = rows["i"]
    assert (row["speedup_method"], row["replicates"]) == ("unpaired", 2) and pd.isna(row["pairs"])
    assert row["speedup"] == row["unpaired_speedup"]
    assert row["speedup"] == pytest.approx(rows["e"]["median_step_ms"] / row["median_step_ms"])


def suite_sweep(root: Path, host: float) -> Path:
    """Two models, each an eager cell and a paired inductor cell (1.25x and 2x); the compiled cells
    ran on a host `host` times slower than the eager cells'."""
    for arch, (eager, compiled), seed in (("m1", (10.0, 8.0), 1), ("m2", (20.0, 10.0), 2)):
        axes = {**GPT2, "arch": arch}
        write_replicates(root, f"{arch}-e", "eager", [steps(eager, seed)], **axes)
        write_paired_replicates(
            root, f"{arch}-i", "inductor", [blocks(eager * host, compiled * host, 10, seed)], **axes
        )
    write_manifest(root, [{"cell_id": f"{m}-{b}"} for m in ("m1", "m2") for b in ("e", "i")])
    return root


def test_geomean_break_even_suite_claims_compare_and_report_use_the_paired_speedup(tmp_path: Path) -> None:
    """Compiled cells measured on a host 30% slower than their eager cells: every downstream answer is
    the paired one (1.25x and 2x: geomean sqrt(2.5)), not the unpaired one (about 0.96x and 1.54x)."""
    a, b = suite_sweep(tmp_path / "a", 1.0), suite_sweep(tmp_path / "b", 1.3)
    data = load_sweep(b, warn=None)
    metrics = cell_metrics(data)
    rows = metrics.set_index("cell_id")
    paired = rows["speedup"]
    for cell, truth in (("m1-i", 1.25), ("m2-i", 2.0)):
        assert rows.loc[cell, "speedup_low"] < truth < rows.loc[cell, "speedup_high"]
    assert rows.loc["m1-i", "unpaired_speedup"] < 1.0

    geomean = geomean_table(metrics).data.set_index("backend")["geomean_speedup"]
    assert geomean.iloc[0] == pytest.approx(math.sqrt(paired["m1-i"] * paired["m2-i"]), rel=1e-9)

    # break-even: the compiled step is the cell's own, the eager step its own x the paired speedup
    breakeven = break_even_table(metrics).data.set_index("cell_id")
    own = metrics.set_index("cell_id")["median_step_ms"]
    assert breakeven.loc["m1-i", "compiled_step_ms"] == pytest.approx(own["m1-i"], rel=1e-9)
    saved_ms = own["m1-i"] * (paired["m1-i"] - 1)
    assert breakeven.loc["m1-i", "break_even_steps"] == pytest.approx(3.5e3 / saved_ms, rel=1e-9)

    suite = suite_tables(metrics, data.steps, "zoo")[2].data.set_index("cell_id")
    assert suite.loc[["m1-i", "m2-i"], "speedup"].tolist() == [paired["m1-i"], paired["m2-i"]]

    claims = check_claims(
        metrics.assign(arch=metrics["arch"].replace({"m1": "gpt-12x12x768"})),
    )
    gpt2 = claims[(claims["cell_id"] == "m1-i")].iloc[0]
    assert gpt2["speedup"] == paired["m1-i"] and "paired speedup 1.2" in gpt2["ours"]
    assert "run-to-run noise not covered" in gpt2["ours"]  # one run of the cell, its eager side in it

    result = compare(open_sweep(a, warn=None), open_sweep(b, warn=None))
    (speedups,) = result.speedups.to_dict("records")
    assert speedups["b_geomean_speedup"] == pytest.approx(geomean.iloc[0], rel=1e-9)
    assert speedups["geomean_ratio"] == pytest.approx(1.0, rel=1e-12)  # the slow host cancels out

    shutil.rmtree(b / "report", ignore_errors=True)
    index = write_report(analyze(b, warn=None), with_plots=False)
    table = csv.DictReader(io.StringIO((index.parent / "tables" / "summary.csv").read_text()))
    (summary,) = [row for row in table if row["cell_id"] == "m1-i"]
    assert summary["speedup_method"] == "paired" and float(summary["speedup"]) == pytest.approx(
        paired["m1-i"]
    )
    page = (index.parent / "index.html").read_text()
    # both cells' unpaired intervals (the slow host's) are disjoint from their paired ones
    assert "<th>vs eager</th>" in page and page.count(f"<td>paired {DISAGREES} ") == 2
