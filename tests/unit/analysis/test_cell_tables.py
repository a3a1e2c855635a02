"""Per-cell metrics and the sweep's tables, from real Parquet written through the workloads' writer."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from analysis.cells.loaded import open_sweep
from analysis.cells.metrics import CELL_COLUMNS, cell_metrics
from analysis.reading.collect import load_sweep
from analysis.rendering.text import csv, latex, markdown
from analysis.studies.sweep.summaries import geomean_table, status_table
from analysis.studies.sweep.table import cells_markdown, summary_table, to_markdown
from tests.helpers.analysis_sweeps import ITEMS, WARMUP_MS, write_cell


def sweep_summary(sweep_dir: Path) -> pd.DataFrame:
    return cell_metrics(load_sweep(sweep_dir))


def by_id(df: pd.DataFrame) -> dict[str, dict[str, Any]]:
    return {row["cell_id"]: row for row in df.to_dict("records")}


def lognormal(median: float, n: int, seed: int) -> list[float]:
    return list(np.random.default_rng(seed).lognormal(np.log(median), 0.05, n))


def test_statistics_come_from_measured_steps_only(tmp_path: Path) -> None:
    steps = lognormal(10.0, 40, seed=1)
    data = list(np.random.default_rng(2).uniform(0.1, 1.0, len(WARMUP_MS) + len(steps)))
    mfu = list(np.random.default_rng(3).uniform(0.2, 0.3, len(WARMUP_MS) + len(steps)))
    write_cell(tmp_path, "e", "eager", step_ms=steps, data_ms=data, mfu=mfu)
    row = by_id(sweep_summary(tmp_path))["e"]
    measured = np.array(steps)
    data_measured, mfu_measured = np.array(data[len(WARMUP_MS) :]), np.array(mfu[len(WARMUP_MS) :])
    assert row["measured_steps"] == len(steps)
    assert row["mean_step_ms"] == pytest.approx(measured.mean())
    assert row["std_step_ms"] == pytest.approx(measured.std(ddof=1))
    assert row["median_step_ms"] == pytest.approx(np.median(measured))
    assert row["p5_step_ms"] == pytest.approx(np.percentile(measured, 5))
    assert row["p95_step_ms"] == pytest.approx(np.percentile(measured, 95))
    assert row["items_per_s"] == pytest.approx(ITEMS / (np.median(measured) / 1e3))
    assert row["mfu_mean"] == pytest.approx(mfu_measured.mean())
    assert row["mfu_std"] == pytest.approx(mfu_measured.std(ddof=1))
    assert row["data_wait_share"] == pytest.approx(data_measured.sum() / measured.sum())


def test_speedup_with_interval_and_memory_against_eager(tmp_path: Path) -> None:
    eager, compiled = lognormal(10.0, 50, seed=1), lognormal(8.0, 50, seed=2)
    write_cell(tmp_path, "e", "eager", step_ms=eager, peak_mem_bytes=4 * 2**30)
    write_cell(tmp_path, "i", "inductor", step_ms=compiled, peak_mem_bytes=3 * 2**30)
    rows = by_id(sweep_summary(tmp_path))
    base, fast = rows["e"], rows["i"]
    assert (base["speedup"], base["speedup_low"], base["speedup_high"]) == (1.0, 1.0, 1.0)
    assert base["baseline_cell_id"] == "e"
    assert fast["speedup"] == pytest.approx(np.median(eager) / np.median(compiled))
    assert 1.0 < fast["speedup_low"] < fast["speedup"] < fast["speedup_high"]
    assert fast["peak_mem_ratio"] == pytest.approx(0.75)


def test_the_accuracy_column_shows_each_cells_worst_check_with_its_numbers(tmp_path: Path) -> None:
    """A cell's replicates each checked their accuracy: one fail_accuracy makes the cell's; eager and
    cells written before the check show nothing."""
    checked = {"accuracy_noise_floor": 0.0, "accuracy_tolerance": 1e-3}
    write_cell(tmp_path, "e", "eager", step_ms=[10.0])
    write_cell(tmp_path, "old", "aot_eager", step_ms=[9.0])
    write_cell(tmp_path, "ok", "inductor", step_ms=[8.0], accuracy="pass", accuracy_rel_diff=2e-7, **checked)
    for repeat, (result, diff) in enumerate([("pass", 3e-4), ("fail_accuracy", 0.0625), ("pass", 1e-6)]):
        write_cell(
            tmp_path, "bad", "cudagraphs", step_ms=[7.0], repeat=repeat, accuracy=result,
            accuracy_rel_diff=diff, **checked,
        )  # fmt: skip
    metrics = sweep_summary(tmp_path)
    rows = by_id(metrics)
    assert (rows["bad"]["accuracy"], rows["bad"]["accuracy_rel_diff"]) == ("fail_accuracy", 0.0625)
    text = by_id(summary_table(metrics).text.rename(columns={"cell": "cell_id"}))
    assert text["ok"]["accuracy"] == "pass (2e-07; eager 0)"
    assert text["bad"]["accuracy"] == "fail_accuracy (0.0625; eager 0)"
    assert text["e"]["accuracy"] == text["old"]["accuracy"] == ""


def test_interval_holds_one_when_the_backends_do_not_differ(tmp_path: Path) -> None:
    same = lognormal(10.0, 30, seed=5)
    write_cell(tmp_path, "e", "eager", step_ms=same)
    write_cell(tmp_path, "a", "aot_eager", step_ms=same[::-1])
    row = by_id(sweep_summary(tmp_path))["a"]
    assert row["speedup"] == pytest.approx(1.0)
    assert row["speedup_low"] < 1.0 < row["speedup_high"]


def test_speedup_needs_an_eager_cell_of_the_same_workload(tmp_path: Path) -> None:
    write_cell(tmp_path, "e32", "eager", step_ms=[10.0], precision="fp32")
    write_cell(tmp_path, "i16", "inductor", step_ms=[5.0], precision="bf16")
    write_cell(tmp_path, "i32b", "inductor", step_ms=[5.0], precision="fp32", batch_size=64)
    rows = by_id(sweep_summary(tmp_path))
    assert math.isnan(rows["i16"]["speedup"]) and math.isnan(rows["i32b"]["speedup"])
    assert pd.isna(rows["i16"]["baseline_cell_id"])


def test_the_eager_cell_with_most_steps_is_the_baseline(tmp_path: Path) -> None:
    write_cell(tmp_path, "short", "eager", step_ms=[20.0] * 5)
    write_cell(tmp_path, "long", "eager", step_ms=[10.0] * 50)
    write_cell(tmp_path, "i", "inductor", step_ms=[5.0] * 50)
    rows = by_id(sweep_summary(tmp_path))
    assert rows["i"]["baseline_cell_id"] == "long" and rows["i"]["speedup"] == pytest.approx(2.0)
    assert rows["short"]["speedup"] == pytest.approx(0.5)


def test_failed_and_not_compiled_cells_stay_marked_without_numbers(tmp_path: Path) -> None:
    write_cell(tmp_path, "e", "eager", step_ms=[10.0])
    write_cell(tmp_path, "f", "inductor", status="failed", error="RuntimeError: boom\nTraceback ...")
    write_cell(tmp_path, "n", "cudagraphs", status="not_compiled", step_ms=[9.0])
    metrics = sweep_summary(tmp_path)
    rows = by_id(metrics)
    assert rows["f"]["status"] == "failed" and math.isnan(rows["f"]["median_step_ms"])
    # not_compiled measured eager execution: its step times are not a result.
    assert rows["n"]["status"] == "not_compiled"
    assert math.isnan(rows["n"]["median_step_ms"]) and math.isnan(rows["n"]["speedup"])
    text = by_id(summary_table(metrics).text.rename(columns={"cell": "cell_id"}))
    assert text["f"]["status"] == "failed" and text["f"]["error"] == "RuntimeError: boom"
    assert text["n"]["median ms"] == "" and text["e"]["median ms"] == "10.00"


def test_latest_completed_attempt_counts(tmp_path: Path) -> None:
    write_cell(tmp_path, "c", "eager", status="failed", step_ms=[99.0], attempt=1)
    write_cell(tmp_path, "c", "eager", status="completed", step_ms=[10.0, 12.0], attempt=2)
    write_cell(tmp_path, "c", "eager", status="failed", attempt=3)
    row = by_id(sweep_summary(tmp_path))["c"]
    assert row["status"] == "completed" and row["median_step_ms"] == 11.0 and row["measured_steps"] == 2


def test_status_counts_and_geometric_means_say_what_they_cover(tmp_path: Path) -> None:
    write_cell(tmp_path, "e1", "eager", step_ms=[10.0], precision="fp32")
    write_cell(tmp_path, "e2", "eager", step_ms=[10.0], precision="bf16")
    write_cell(tmp_path, "i1", "inductor", step_ms=[5.0], precision="fp32")  # 2x
    write_cell(tmp_path, "i2", "inductor", step_ms=[1.25], precision="bf16")  # 8x
    write_cell(tmp_path, "i3", "inductor", status="failed", precision="tf32")
    write_cell(tmp_path, "n", "cudagraphs", status="not_compiled", step_ms=[9.0], precision="fp32")
    metrics = sweep_summary(tmp_path)
    counts = status_table(metrics).data.set_index("backend")
    assert counts.loc["inductor", "completed"] == 2 and counts.loc["inductor", "failed"] == 1
    assert counts.loc["all", "cells"] == 6 and counts.loc["cudagraphs", "not_compiled"] == 1
    geomean = geomean_table(metrics)
    rows = geomean.data.set_index("backend")
    assert rows.loc["inductor", "geomean_speedup"] == pytest.approx(4.0)
    assert (rows.loc["inductor", "cells_covered"], rows.loc["inductor", "cells"]) == (2, 3)
    assert rows.loc["inductor", "not_covered"] == "1 failed"
    assert "2 of 3 cells" in markdown(geomean) and "0 of 1 cells" in markdown(geomean)


def test_renderings(tmp_path: Path) -> None:
    write_cell(tmp_path, "e", "eager", step_ms=[10.0, 10.0], mfu=[0.25] * 4, data_source="synthetic_data")
    write_cell(tmp_path, "i", "inductor", step_ms=[4.0, 4.0], mfu=[0.5] * 4, data_source="synthetic_data")
    write_cell(tmp_path, "f", "aot_eager", status="failed")
    metrics = sweep_summary(tmp_path)
    table = summary_table(metrics)
    lines = markdown(table).splitlines()
    assert lines[0] == "### Cells" and lines[2].startswith("| cell ")
    eager, failed, inductor = lines[4:7]  # eager first, then the other backends by name
    assert "| eager " in eager and "25.0% ± 0.0%" in eager
    assert "| aot_eager " in failed and "| failed " in failed
    assert "| inductor " in inductor and "2.50x" in inductor
    tex = latex(table)
    assert (
        tex.startswith(r"\begin{table}") and r"\begin{tabular}{" + "l" * len(table.text.columns) + "}" in tex
    )
    assert r"25.0\% $\pm$ 0.0\%" in tex and "synthetic_data" not in tex  # escaped: LaTeX compiles it
    back = pd.read_csv(io.StringIO(csv(table)))
    assert list(back.columns) == CELL_COLUMNS and len(back) == 3
    assert back.set_index("cell_id").loc["i", "speedup"] == pytest.approx(2.5)
    assert to_markdown(metrics, full=True) in markdown(table)
    assert to_markdown(metrics) in markdown(table.compact)


def test_the_cells_a_sweep_ran_opened_equal_the_sweep_read(tmp_path: Path) -> None:
    """`compilebench sweep` opens the cells it ran: the same metrics as a whole-sweep read."""
    write_cell(tmp_path, "e", "eager", step_ms=lognormal(10.0, 20, seed=1))
    write_cell(tmp_path, "i", "inductor", step_ms=lognormal(7.0, 20, seed=2))
    write_cell(tmp_path, "f", "inductor", status="failed", precision="fp32")
    one_by_one = open_sweep(tmp_path, ["i", "f", "e"], warn=None).metrics
    whole = cell_metrics(load_sweep(tmp_path, warn=None))
    pd.testing.assert_frame_equal(one_by_one, whole, check_dtype=False)


def test_the_table_a_sweep_prints_says_what_a_one_run_verdict_cannot_see(tmp_path: Path) -> None:
    """What `compilebench sweep` prints at its end: a verdict from one run is marked, and the note
    under the table says why (before issue 38's notes it printed `faster†` with nothing to explain it)."""
    write_cell(tmp_path, "e", "eager", step_ms=[10.0, 10.1, 9.9] * 20)
    write_cell(tmp_path, "i", "inductor", step_ms=[8.0, 8.1, 7.9] * 20)
    text = cells_markdown(open_sweep(tmp_path, ["e", "i"]))
    assert "| faster† " in text
    note = " ".join(text.split("\n\n", 1)[1].split())
    assert "†: from one run" in note and "cannot see how runs differ" in note
    assert "no difference where it lies within ±2.0% of 1" in note  # the default margin, stated
    assert note.endswith("Every column: `compilebench analyze SWEEP_DIR --full`, and the report.")
