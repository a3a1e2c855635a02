"""Per-cell summary from real Parquet files written through the workloads schema."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from analysis.collect import read_sweep
from analysis.tables import SUMMARY_COLUMNS, summarize, sweep_summary, to_csv, to_markdown
from orchestrator.cli import main
from workloads.schema import RUN_SCHEMA, STEPS_SCHEMA, append_rows_atomic

ITEMS = 1000  # items per step


def make_cell(
    sweep: Path,
    cell_id: str,
    backend: str = "eager",
    status: str = "completed",
    measure_ms: list[float] | None = None,
    precision: str = "bf16",
    attempt: int = 1,
    **run: Any,
) -> Path:
    """A cell directory as a workload leaves it: config.yaml, run.parquet, steps.parquet."""
    directory = sweep / "cells" / cell_id
    directory.mkdir(parents=True, exist_ok=True)
    config = {"model": {"name": "gpt"}, "size": "tiny", "backend": {"name": backend, "mode": None},
              "precision": {"name": precision}, "cell_id": cell_id}  # fmt: skip
    (directory / "config.yaml").write_text(yaml.safe_dump(config))
    row = dict(cell_id=cell_id, attempt=attempt, status=status, model="gpt", size="tiny", backend=backend,
               precision=precision, data_source="synthetic", seed=1337, batch_size=8, graph_count=0 if backend == "eager" else 2,
               graph_break_count=0, compile_time_s=None if backend == "eager" else 3.5, **run)  # fmt: skip
    append_rows_atomic(directory / "run.parquet", [row], RUN_SCHEMA)
    if measure_ms is not None:
        # Warm-up steps are slow on purpose: they must not reach the statistics.
        times = [("warmup", 5000.0), ("warmup", 900.0)] + [("measure", ms) for ms in measure_ms]
        steps = [dict(cell_id=cell_id, attempt=attempt, step=i, phase=phase, step_time_ms=ms, items=ITEMS,
                      mfu=0.25 if phase == "measure" else 0.01) for i, (phase, ms) in enumerate(times)]  # fmt: skip
        append_rows_atomic(directory / "steps.parquet", steps, STEPS_SCHEMA)
    return directory


def by_id(df: pd.DataFrame) -> dict[str, dict[str, Any]]:
    return {row["cell_id"]: row for row in df.to_dict("records")}


def test_summary_statistics_and_speedup(tmp_path: Path) -> None:
    make_cell(tmp_path, "e", "eager", measure_ms=[10.0, 12.0, 11.0])
    make_cell(tmp_path, "i", "inductor", measure_ms=[5.0, 6.0, 5.5])
    rows = by_id(sweep_summary(tmp_path))
    eager, inductor = rows["e"], rows["i"]
    assert eager["median_step_ms"] == 11.0 and eager["mean_step_ms"] == 11.0
    assert eager["std_step_ms"] == pytest.approx(1.0)
    assert eager["items_per_s"] == pytest.approx(ITEMS / 0.011)
    assert eager["mfu"] == pytest.approx(0.25)
    assert eager["speedup"] == pytest.approx(1.0)
    assert inductor["speedup"] == pytest.approx(11.0 / 5.5)
    assert (inductor["compile_time_s"], inductor["graph_count"], inductor["graph_break_count"]) == (3.5, 2, 0)


def test_eager_row_comes_first_and_columns_are_fixed(tmp_path: Path) -> None:
    make_cell(tmp_path, "a", "inductor", measure_ms=[5.0])
    make_cell(tmp_path, "b", "eager", measure_ms=[10.0])
    df = sweep_summary(tmp_path)
    assert list(df.columns) == SUMMARY_COLUMNS
    assert list(df["backend"]) == ["eager", "inductor"]


def test_speedup_needs_eager_of_same_precision(tmp_path: Path) -> None:
    make_cell(tmp_path, "e32", "eager", measure_ms=[10.0], precision="fp32")
    make_cell(tmp_path, "i16", "inductor", measure_ms=[5.0], precision="bf16")
    rows = by_id(sweep_summary(tmp_path))
    assert math.isnan(rows["i16"]["speedup"])


def test_failed_and_not_compiled_cells_stay_without_numbers(tmp_path: Path) -> None:
    make_cell(tmp_path, "e", "eager", measure_ms=[10.0])
    make_cell(tmp_path, "f", "inductor", status="failed", error="RuntimeError: boom")
    make_cell(tmp_path, "n", "cudagraphs", status="not_compiled", measure_ms=[9.0])
    rows = by_id(sweep_summary(tmp_path))
    assert rows["f"]["status"] == "failed" and math.isnan(rows["f"]["median_step_ms"])
    # not_compiled measured eager execution: its step times are not a result.
    assert rows["n"]["status"] == "not_compiled"
    assert math.isnan(rows["n"]["median_step_ms"]) and math.isnan(rows["n"]["speedup"])


def test_latest_completed_attempt_counts(tmp_path: Path) -> None:
    make_cell(tmp_path, "c", "eager", status="failed", measure_ms=[99.0], attempt=1)
    make_cell(tmp_path, "c", "eager", status="completed", measure_ms=[10.0], attempt=2)
    row = by_id(sweep_summary(tmp_path))["c"]
    assert row["status"] == "completed" and row["median_step_ms"] == 10.0


def test_corrupt_and_missing_files_are_reported_and_skipped(tmp_path: Path) -> None:
    make_cell(tmp_path, "good", "eager", measure_ms=[10.0])
    bad = make_cell(tmp_path, "bad", "inductor", measure_ms=[5.0])
    (bad / "run.parquet").write_bytes(b"PAR1 this is not parquet")
    steps_bad = make_cell(tmp_path, "nosteps", "inductor", measure_ms=[5.0])
    (steps_bad / "steps.parquet").write_bytes(b"garbage")
    pending = tmp_path / "cells" / "pending"
    pending.mkdir()
    (pending / "config.yaml").write_text(yaml.safe_dump({"model": {"name": "gpt"}, "size": "tiny", "backend": {"name": "eager"}}))

    warn = io.StringIO()
    rows = by_id(summarize(read_sweep(tmp_path, warn)))
    assert rows["good"]["status"] == "completed"
    assert rows["bad"]["status"] == "unreadable" and rows["bad"]["backend"] == "inductor"
    assert rows["pending"]["status"] == "no_result" and rows["pending"]["size"] == "tiny"
    # Without steps the run row's own summary is used (this one has none): no crash, no numbers.
    assert rows["nosteps"]["status"] == "completed" and math.isnan(rows["nosteps"]["median_step_ms"])
    messages = warn.getvalue()
    assert str(bad / "run.parquet") in messages
    assert str(steps_bad / "steps.parquet") in messages
    assert str(pending / "run.parquet") in messages


def test_markdown_and_csv(tmp_path: Path) -> None:
    make_cell(tmp_path, "e", "eager", measure_ms=[10.0, 10.0])
    make_cell(tmp_path, "i", "inductor", measure_ms=[4.0, 4.0])
    make_cell(tmp_path, "f", "aot_eager", status="failed")
    df = sweep_summary(tmp_path)
    lines = to_markdown(df).splitlines()
    assert len(lines) == 2 + 3
    assert lines[0].startswith("| cell_id") and set(lines[1]) <= {"|", "-", " "}
    eager, failed, inductor = lines[2:]  # eager first, then the other backends by name
    assert "| eager" in eager and "25.0%" in eager  # MFU as a percentage
    assert "| aot_eager" in failed and "| failed" in failed
    assert "| inductor" in inductor and "2.50x" in inductor
    back = pd.read_csv(io.StringIO(to_csv(df)))
    assert list(back.columns) == SUMMARY_COLUMNS and len(back) == 3


def test_analyze_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(tmp_path)]) == 1
    assert "no cells" in capsys.readouterr().err
    make_cell(tmp_path, "e", "eager", measure_ms=[10.0])
    assert main(["analyze", str(tmp_path), "--format", "csv"]) == 0
    assert capsys.readouterr().out.startswith("cell_id,model,size")
    assert main(["analyze", str(tmp_path / "nope")]) == 2
