"""A sweep for machines: `analyze --format json` (the per-cell table as records) and the Python
entry point `analysis.sweep_frames` (the per-cell and per-step tables as DataFrames)."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pandas as pd
import pytest

import analysis
from analysis import report
from analysis.cells.metrics import CELL_COLUMNS
from orchestrator.cli.main import main
from tests.helpers.analysis_sweeps import WARMUP_MS, write_seminar_sweep


def analyze(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["analyze", *args, "--no-plots"])
    return code, capsys.readouterr().out


def test_json_is_the_per_cell_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_seminar_sweep(tmp_path)
    code, out = analyze(capsys, str(tmp_path), "--format", "json")
    assert code == 0
    records = json.loads(out)
    assert len(records) == 12 and all(list(record) == CELL_COLUMNS for record in records)
    _, as_csv = analyze(capsys, str(tmp_path), "--format", "csv")
    from_csv = pd.read_csv(io.StringIO(as_csv))
    for record, (_, row) in zip(
        records, from_csv.iterrows()
    ):  # the same numbers as the CSV, null where empty
        for column in CELL_COLUMNS:
            value, expected = record[column], row[column]
            if pd.isna(expected):
                assert value is None, (record["cell_id"], column, value)
            elif isinstance(value, float):
                assert math.isclose(value, float(expected), rel_tol=1e-9), (record["cell_id"], column)
            else:
                assert str(value) == str(expected) or value == expected, (
                    record["cell_id"],
                    column,
                    value,
                    expected,
                )
    failed = next(r for r in records if r["cell_id"] == "r34-inductor")
    assert failed["status"] == "failed" and failed["speedup"] is None


def test_sweep_frames_are_the_cells_and_their_steps(tmp_path: Path) -> None:
    write_seminar_sweep(tmp_path)
    cells, steps = analysis.sweep_frames(tmp_path)
    pd.testing.assert_frame_equal(cells, report.analyze(tmp_path).metrics)  # what `analyze` tabulates
    assert list(cells.columns) == CELL_COLUMNS and len(cells) == 12
    assert set(cells["cell_id"]) - set(steps["cell_id"]) == {"r34-inductor"}  # failed before its first step
    per_cell = steps.groupby("cell_id")["phase"].value_counts().unstack()
    assert (per_cell["warmup"] == len(WARMUP_MS)).all() and (per_cell["measure"] == 3).all()
    gpt2 = steps[(steps["cell_id"] == "gpt2-eager") & (steps["phase"] == "measure")]
    assert gpt2["step_time_ms"].tolist() == [3000.0, 3010.0, 3020.0] and set(gpt2["repeat"]) == {0}
    assert cells.set_index("cell_id").loc["gpt2-eager", "median_step_ms"] == 3010.0
