"""After how many steps compiling pays for itself (analysis/cells/breakeven.py): in the per-cell metrics,
the cell table, the break-even table, the CSV and the report page."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pytest

from analysis.cells.metrics import cell_metrics
from analysis.reading.collect import SweepData, load_sweep
from analysis.studies.sweep.summaries import break_even_table
from analysis.studies.sweep.table import summary_table
from orchestrator.cli.main import main
from tests.helpers.analysis_sweeps import write_cell, write_ranks_cell


def write_sweep(sweep: Path) -> None:
    """Eager 10 ms; inductor 8 ms (compile 3.5 s), aot_eager 12 ms (slower); two processes: eager
    10 ms, inductor 5 ms, compile time as the workload computes it from the warm-up steps."""
    write_cell(sweep, "e", "eager", step_ms=[10.0, 10.0, 10.0])
    write_cell(sweep, "i", "inductor", step_ms=[8.0, 8.0, 8.0], compile_time_s=3.5)
    write_cell(sweep, "a", "aot_eager", step_ms=[12.0, 12.0, 12.0], compile_time_s=1.0)
    write_ranks_cell(sweep, "e2", "eager", [[10.0] * 3, [10.0] * 3])
    write_ranks_cell(sweep, "i2", "inductor", [[5.0] * 3, [5.0] * 3])


def with_warm_compile(data: SweepData, warm: dict[str, float]) -> SweepData:
    """The sweep as analysis reads it once run.parquet has `compile_warm_s` (the cold/warm runs of
    issue 13 item 1 write it; until then RUN_SCHEMA has no such column to write it through)."""
    data.cells["compile_warm_s"] = data.cells["cell_id"].map(warm)
    return data


def test_steps_and_gpu_minutes_cold_and_warm(tmp_path: Path) -> None:
    write_sweep(tmp_path)
    metrics = cell_metrics(with_warm_compile(load_sweep(tmp_path, warn=None), {"i": 0.5})).set_index(
        "cell_id"
    )
    # 3.5 s / (10 - 8) ms = 1,750 steps; 1,750 eager steps of 10 ms on one GPU = 0.29 GPU-minutes.
    assert metrics.at["i", "break_even_steps"] == pytest.approx(1750)
    assert metrics.at["i", "break_even_gpu_min"] == pytest.approx(1750 * 0.010 / 60)
    assert metrics.at["i", "break_even_steps_warm"] == pytest.approx(250)
    assert metrics.at["i", "break_even_gpu_min_warm"] == pytest.approx(250 * 0.010 / 60)
    assert metrics.at["a", "pays_off"] is False and pd.isna(
        metrics.at["a", "break_even_steps"]
    )  # slower: never
    assert metrics.at["i", "pays_off"] is True and pd.isna(metrics.at["e", "pays_off"])
    compile_s = metrics.at["i2", "compile_time_s"]
    assert metrics.at["i2", "break_even_steps"] == pytest.approx(1e3 * compile_s / 5)
    assert metrics.at["i2", "break_even_gpu_min"] == pytest.approx(
        1e3 * compile_s / 5 * 0.010 * 2 / 60
    )  # 2 GPUs
    assert metrics.loc[["e", "e2"], ["break_even_steps", "break_even_steps_warm"]].isna().all().all()
    assert pd.isna(metrics.at["a", "break_even_steps_warm"])  # no warm compile measured

    flat = metrics.reset_index()
    cells = summary_table(flat).text.set_index("cell")
    assert (
        cells.at["i", "break-even steps"] == "1,750 (warm 250)"
        and cells.at["i", "break-even GPU-min"] == "0.292 (warm 0.0417)"
    )
    assert cells.at["a", "break-even steps"] == "never" and cells.at["e", "break-even steps"] == ""
    table = break_even_table(flat)
    rows = table.text.set_index("cell")
    assert list(rows.index) == [c for c in flat["cell_id"] if c in {"i", "a", "i2"}]  # compiled cells only
    assert rows.loc["i", ["eager ms", "compiled ms", "steps", "steps (warm)"]].tolist() == [
        "10.00",
        "8.00",
        "1,750",
        "250",
    ]
    assert rows.at["a", "steps"] == "never" and rows.at["a", "GPU-min"] == "never"


def test_a_cold_and_warm_cell_breaks_even_on_its_cold_compile(tmp_path: Path) -> None:
    """Under compile.measure=cold_warm the run row's compile_time_s is the warm compile: the
    break-even counts and its table's compile seconds are the cold one's."""
    write_cell(tmp_path, "e", "eager", step_ms=[10.0, 10.0, 10.0])
    write_cell(
        tmp_path,
        "i",
        "inductor",
        step_ms=[8.0, 8.0, 8.0],
        compile_time_s=0.5,
        compile_cold_s=3.5,
        compile_warm_s=0.5,
    )
    flat = cell_metrics(load_sweep(tmp_path, warn=None))
    rows = break_even_table(flat).text.set_index("cell")
    assert rows.loc["i", ["compile s", "steps", "warm compile s", "steps (warm)"]].tolist() == [
        "3.50",
        "1,750",
        "0.5",
        "250",
    ]


def test_the_csv_and_the_report_page_carry_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_sweep(tmp_path)
    assert main(["analyze", str(tmp_path), "--format", "csv", "--no-plots"]) == 0
    cells = pd.read_csv(io.StringIO(capsys.readouterr().out)).set_index("cell_id")
    assert cells.at["i", "break_even_steps"] == pytest.approx(1750) and cells.at["i", "pays_off"]
    assert not cells.at["a", "pays_off"] and pd.isna(cells.at["a", "break_even_steps"])
    page = (tmp_path / "report" / "index.html").read_text()
    table = page[page.index('id="table-break_even"') :]
    table = table[: table.index("</table>")]
    assert '<td class="num">1,750</td>' in table and "<td>never</td>" in table
    assert (tmp_path / "report" / "tables" / "break_even.csv").is_file()
