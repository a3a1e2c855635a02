"""fp8 against bf16 in `compilebench analyze`: each fp8 training cell beside its bf16 counterpart, the
speedup and its interval against brute force, the verdicts, what is left out, the report, and sweeps
without fp8 left as they were."""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis.cells.metrics import cell_metrics
from analysis.cells.uncertainty import median_ratio_intervals
from analysis.reading.collect import load_sweep
from analysis.report import analyze
from analysis.studies.fp8 import FP8_TABLE, fp8_rows
from orchestrator.cli.main import main
from tests.helpers.analysis_sweeps import (
    H100,
    write_cell,
    write_gemm_cell,
    write_replicates,
    write_seminar_sweep,
)

GPT = dict(model="gpt", size="small", arch="gpt-6x6x384", batch_size=64, **H100)
INDUCTOR = dict(compile_mode="default")
LINEARS = dict(fp8_linears=24, fp8_skipped_head=1, fp8_skipped_misaligned=0)
TENSORWISE = dict(precision="fp8", fp8_recipe="tensorwise", **LINEARS)
#: Two replicates of three steps per cell: (bf16 or fp8 recipe, backend) -> replicate step times.
STEPS = {
    ("bf16", "eager"): [[100.0, 101.0, 102.0], [104.0, 105.0, 106.0]],
    ("bf16", "inductor"): [[80.0, 81.0, 82.0], [83.0, 84.0, 85.0]],
    ("tensorwise", "eager"): [[120.0, 121.0, 122.0], [118.0, 119.0, 120.0]],
    ("tensorwise", "inductor"): [[60.0, 61.0, 62.0], [64.0, 65.0, 66.0]],
    ("rowwise", "inductor"): [[80.0, 81.0, 82.0], [83.0, 84.0, 85.0]],  # bf16 inductor's times
}


def centre(replicates: list[list[float]]) -> float:
    """A cell's median step: the geometric mean of its runs' medians."""
    return float(np.exp(np.mean(np.log([np.median(r) for r in replicates]))))


def welch_by_hand(top: list[list[float]], bottom: list[list[float]]) -> tuple[float, float]:
    """Welch's 95% interval of centre(top) / centre(bottom) over the runs' log medians."""
    a, b = (np.log([np.median(r) for r in runs]) for runs in (top, bottom))
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = float(stats.t.ppf(0.975, df)) * np.sqrt(va + vb)
    return float(np.exp(a.mean() - b.mean() - half)), float(np.exp(a.mean() - b.mean() + half))


def write_fp8_sweep(root: Path) -> Path:
    """bf16 and fp8 (tensorwise, rowwise) cells of one GPT, eager and inductor, two replicates each;
    and cells the table leaves out: an fp8 cell without a bf16 counterpart (max-autotune, batch 16), a
    failed fp8 cell, and bf16 and fp8 GEMM cells."""
    for (kind, backend), replicates in STEPS.items():
        precision = {} if kind == "bf16" else dict(TENSORWISE, fp8_recipe=kind)
        compiled = {} if backend == "eager" else INDUCTOR
        accuracy = (
            dict(accuracy="pass", accuracy_rel_diff=0.001, accuracy_noise_floor=0.0) if compiled else {}
        )
        run = {**GPT, "precision": "bf16", **precision, **compiled, **accuracy}
        write_replicates(root, f"{kind}-{backend}", backend, replicates, **run)
    write_cell(
        root,
        "fp8-autotune",
        "inductor",
        step_ms=[50.0, 51.0],
        compile_mode="max-autotune",
        **GPT,
        **TENSORWISE,
    )
    write_cell(root, "fp8-b16", "eager", step_ms=[30.0, 31.0], **{**GPT, "batch_size": 16}, **TENSORWISE)
    write_cell(root, "fp8-failed", "inductor", status="failed", error="boom", **GPT, **INDUCTOR, **TENSORWISE)
    write_gemm_cell(root, "gemm-bf16", "eager", "bf16", 16, [48.0, 48.1])
    write_gemm_cell(root, "gemm-fp8", "eager", "fp8", 16, [25.9, 26.0], recipe="tensorwise")
    return root


def rows_of(root: Path, equivalence: float = 0.0) -> pd.DataFrame:
    data = load_sweep(root, warn=None)
    training = cell_metrics(data)
    return fp8_rows(data, training[training["model"] != "gemm"], equivalence).set_index("fp8_cell_id")


def test_each_fp8_cell_against_its_bf16_counterpart(tmp_path: Path) -> None:
    rows = rows_of(write_fp8_sweep(tmp_path))
    # Unmatched fp8 cells, failed ones and GEMM cells are left out.
    assert list(rows.index) == ["tensorwise-eager", "rowwise-inductor", "tensorwise-inductor"]
    assert list(rows["bf16_cell_id"]) == ["bf16-eager", "bf16-inductor", "bf16-inductor"]
    for cell, row in rows.iterrows():
        kind, backend = cell.split("-")
        bf16, fp8 = centre(STEPS["bf16", backend]), centre(STEPS[kind, backend])
        assert (row["bf16_ms"], row["fp8_ms"]) == (pytest.approx(bf16), pytest.approx(fp8))
        assert row["speedup"] == pytest.approx(bf16 / fp8)
        # Two runs each: Welch's interval over the runs, as the per-cell table's speedups.
        low, high = welch_by_hand(STEPS["bf16", backend], STEPS[kind, backend])
        assert (row["speedup_low"], row["speedup_high"]) == (pytest.approx(low), pytest.approx(high))
        assert row["fp8_recipe"] == kind and row["fp8_linears"] == 24 and row["fp8_skipped_head"] == 1
    assert list(rows["verdict"]) == ["slower", "undecided", "faster"]
    assert rows.loc["tensorwise-inductor", "accuracy"] == "pass"
    # Within a 15% margin the rowwise cell, with bf16's own times, is the same speed (two runs each:
    # the interval over runs, 1 to 2 degrees of freedom, is [0.90, 1.12]).
    assert rows_of(tmp_path, equivalence=0.15).loc["rowwise-inductor", "verdict"] == "no difference"


def test_the_intervals_are_the_per_cell_tables(tmp_path: Path) -> None:
    """The speedup interval of inductor over eager in the per-cell table, from `median_ratio_intervals`:
    over runs (two each), and from the bootstrap draws for cells of one run."""
    write_fp8_sweep(tmp_path)
    data = load_sweep(tmp_path, warn=None)
    metrics = cell_metrics(data)
    for cells, interval in (
        (["bf16-eager", "bf16-inductor"], "across 2 runs"),
        (["tensorwise-eager", "fp8-autotune"], "within one process"),  # 2 runs against 1
    ):
        pair = metrics[metrics["cell_id"].isin(cells)].reset_index(drop=True)
        top, bottom = (np.flatnonzero(pair["cell_id"] == c) for c in cells)
        (low,), (high,) = median_ratio_intervals(pair, data.steps, top, bottom)
        own = pair.loc[bottom[0]]
        assert (own["baseline_cell_id"], own["interval"]) == (cells[0], interval)
        assert (low, high) == (pytest.approx(own["speedup_low"]), pytest.approx(own["speedup_high"]))


def test_interval_over_three_runs_is_welchs(tmp_path: Path) -> None:
    """Three runs each: bf16 / fp8 with Welch's interval over the runs' median steps, by hand."""
    bf16 = [list(np.linspace(99.0, 101.0, 41) + r) for r in (0.0, 3.0, 5.0)]
    fp8 = [list(np.linspace(79.0, 81.0, 41) + r) for r in (0.0, 1.0, 4.0)]
    write_replicates(tmp_path, "bf16", "inductor", bf16, **GPT, **INDUCTOR)
    write_replicates(tmp_path, "fp8", "inductor", fp8, **GPT, **INDUCTOR, **TENSORWISE)
    row = rows_of(tmp_path).loc["fp8"]
    low, high = welch_by_hand(bf16, fp8)
    assert row["speedup"] == pytest.approx(centre(bf16) / centre(fp8))
    assert (row["speedup_low"], row["speedup_high"]) == (pytest.approx(low), pytest.approx(high))


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["analyze", *args])
    return code, capsys.readouterr().out


def test_table_in_the_terminal_and_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_fp8_sweep(tmp_path)
    code, out = run(capsys, str(tmp_path), "--no-plots", "--equivalence", "0.15")
    assert code == 0
    table = out.split("### fp8 against bf16: speedup of the same cell in fp8")[1].split("###")[0]
    lines = [line for line in table.splitlines() if line.startswith("| ")]
    assert len(lines) == 2 + 3  # header, rule, three fp8 cells
    assert re.search(
        r"\| eager +\| tensorwise \| 103\.0 +\| 120\.0 +\| 0\.86x \[", table
    )  # 102.98: geometric
    assert "| slower " in table and "| faster " in table and "| no difference " in table
    assert "pass (0.001; eager 0)" in table and "24 (+1 head)" in table
    assert "gemm" not in table and "fp8-autotune" not in table and "±15%" in table
    report = tmp_path / "report"
    assert "### fp8 against bf16" in (report / "index.md").read_text()
    assert "fp8 against bf16" in (report / "index.html").read_text()
    raw = pd.read_csv(report / "tables" / f"{FP8_TABLE}.csv")
    assert list(raw["fp8_cell_id"]) == ["tensorwise-eager", "rowwise-inductor", "tensorwise-inductor"]
    assert raw.loc[2, "speedup"] == pytest.approx(
        centre(STEPS["bf16", "inductor"]) / centre(STEPS["tensorwise", "inductor"])
    )
    assert ",24,1,0\n" in (report / "tables" / f"{FP8_TABLE}.csv").read_text()  # fp8_linears and the skipped
    # --format csv / json print the per-cell table only, as for every other table.
    code, out = run(capsys, str(tmp_path), "--format", "csv", "--no-plots")
    assert (
        code == 0
        and "fp8_linears" not in out
        and "tensorwise-eager" in pd.read_csv(io.StringIO(out))["cell_id"].values
    )


def test_a_sweep_without_fp8_has_the_tables_it_had(tmp_path: Path) -> None:
    write_seminar_sweep(tmp_path)
    assert [t.name for t in analyze(tmp_path, warn=None).tables] == [
        "summary", "status", "geomean", "break_even", "seminar_table1", "seminar_table2", "seminar_table3",
    ]  # fmt: skip
    # An fp8 cell without a bf16 counterpart (the seminar's char cells run batch 64) is no table either.
    write_cell(
        tmp_path, "fp8-alone", "eager", step_ms=[10.0, 11.0], **{**GPT, "batch_size": 32}, **TENSORWISE
    )
    assert FP8_TABLE not in [t.name for t in analyze(tmp_path, warn=None).tables]
