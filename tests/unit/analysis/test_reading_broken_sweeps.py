"""Reading sweeps that are still running or partly broken: everything readable is analysed, every
problem is reported with its path."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from analysis.cells.metrics import cell_metrics
from analysis.reading.collect import NO_RESULT, UNREADABLE, load_sweep
from tests.helpers.analysis_sweeps import write_cell, write_manifest
from workloads.contract.schema import RUN_SCHEMA, write_parquet_atomic


def problems(sweep: Path) -> tuple[dict[str, dict], dict[str, str], str]:
    """(metrics rows by cell id, problem message by path, the warnings printed)."""
    warn = io.StringIO()
    data = load_sweep(sweep, warn)
    rows = {row["cell_id"]: row for row in cell_metrics(data).to_dict("records")}
    return rows, {str(p.path): p.message for p in data.problems}, warn.getvalue()


def test_broken_files_are_reported_with_their_path_and_the_rest_analysed(tmp_path: Path) -> None:
    write_cell(tmp_path, "good", "eager", step_ms=[10.0, 11.0])
    half = write_cell(tmp_path, "half", "inductor", step_ms=[5.0]) / "run.parquet"
    half.write_bytes(half.read_bytes()[: half.stat().st_size // 2])  # a copy that stopped half-way
    garbage = write_cell(tmp_path, "garbage", "aot_eager", step_ms=[5.0]) / "run.parquet"
    garbage.write_bytes(b"PAR1 this is not parquet")
    bad_steps = write_cell(tmp_path, "badsteps", "inductor", step_ms=[5.0]) / "steps.parquet"
    bad_steps.write_bytes(bad_steps.read_bytes()[:-20])
    pending = tmp_path / "cells" / "pending"
    pending.mkdir()
    (pending / "config.yaml").write_text(
        yaml.safe_dump({"model": {"name": "gpt"}, "size": "small", "backend": {"name": "inductor"}})
    )
    rows, found, printed = problems(tmp_path)

    assert rows["good"]["status"] == "completed" and rows["good"]["median_step_ms"] == 10.5
    assert rows["half"]["status"] == UNREADABLE and rows["half"]["backend"] == "inductor"  # from config.yaml
    assert rows["garbage"]["status"] == UNREADABLE
    assert rows["pending"]["status"] == NO_RESULT and rows["pending"]["size"] == "small"
    # Steps unreadable: the run row is there, with no step statistics to give (this one has none).
    assert rows["badsteps"]["status"] == "completed" and math.isnan(rows["badsteps"]["median_step_ms"])
    for path in (half, garbage, bad_steps, pending / "run.parquet", tmp_path / "manifest.parquet"):
        assert str(path) in found and str(path) in printed
    assert found[str(pending / "run.parquet")] == "no result yet"
    assert found[str(tmp_path / "manifest.parquet")].startswith("no manifest")


def test_a_run_file_without_rows_is_no_result(tmp_path: Path) -> None:
    path = write_cell(tmp_path, "e", "eager", step_ms=[10.0]) / "run.parquet"
    write_parquet_atomic(RUN_SCHEMA.empty_table(), path)
    rows, found, _ = problems(tmp_path)
    assert rows["e"]["status"] == NO_RESULT and found[str(path)] == "no rows"


def test_manifest_cells_without_a_directory_are_listed(tmp_path: Path) -> None:
    write_cell(tmp_path, "done", "eager", step_ms=[10.0])
    write_manifest(
        tmp_path,
        [
            {"cell_id": "done", "model": "gpt", "size": "tiny", "backend": "eager"},
            {
                "cell_id": "queued",
                "model": "resnet",
                "size": "medium",
                "backend": "inductor",
                "precision": "tf32",
            },
        ],
    )
    rows, found, _ = problems(tmp_path)
    assert rows["queued"]["status"] == NO_RESULT
    assert (rows["queued"]["model"], rows["queued"]["size"], rows["queued"]["precision"]) == (
        "resnet",
        "medium",
        "tf32",
    )
    assert found == {str(tmp_path / "cells" / "queued"): "in the manifest, no cell directory"}


def test_unreadable_manifest_is_reported_and_cells_still_read(tmp_path: Path) -> None:
    write_cell(tmp_path, "done", "eager", step_ms=[10.0])
    (tmp_path / "manifest.parquet").write_bytes(b"not parquet")
    rows, found, _ = problems(tmp_path)
    assert rows["done"]["status"] == "completed"
    assert found[str(tmp_path / "manifest.parquet")].startswith("cannot read")


def test_completed_cell_without_steps_keeps_its_run_summary(tmp_path: Path) -> None:
    write_cell(
        tmp_path, "e", "eager", median_step_ms=12.0, mean_step_ms=12.5, std_step_ms=0.5, measured_steps=20
    )
    rows, found, _ = problems(tmp_path)
    assert (rows["e"]["median_step_ms"], rows["e"]["mean_step_ms"], rows["e"]["measured_steps"]) == (
        12.0,
        12.5,
        20,
    )
    assert found[str(tmp_path / "cells" / "e" / "steps.parquet")] == "completed cell without steps"


def test_files_of_an_older_schema_are_read_with_nulls_for_new_columns(tmp_path: Path) -> None:
    """A run.parquet written before columns were added (here: without `arch` and `cudagraph_skips`)."""
    write_cell(tmp_path, "e", "eager", step_ms=[10.0, 12.0])
    path = tmp_path / "cells" / "e" / "run.parquet"
    old = pq.read_table(path).drop_columns(["arch", "cudagraph_skips"])
    write_parquet_atomic(old, path)
    assert "arch" not in pq.read_schema(path).names and len(RUN_SCHEMA) > len(old.schema)
    rows, found, _ = problems(tmp_path)
    assert rows["e"]["status"] == "completed" and rows["e"]["median_step_ms"] == 11.0
    assert rows["e"]["arch"] is None or math.isnan(rows["e"]["arch"])


def test_steps_of_other_attempts_are_left_out(tmp_path: Path) -> None:
    write_cell(tmp_path, "c", "eager", status="oom", step_ms=[500.0, 600.0], attempt=1)
    write_cell(tmp_path, "c", "eager", step_ms=[10.0, 20.0], attempt=2)
    data = load_sweep(tmp_path, warn=None)
    assert set(data.steps["attempt"]) == {2} and len(data.steps) == 2 + 2  # warm-up and measured steps
    assert pa.types.is_integer(pa.array(data.steps["step"]).type)


def test_an_empty_directory_is_no_sweep(tmp_path: Path) -> None:
    data = load_sweep(tmp_path, warn=None)
    assert data.cells.empty and data.steps.empty and data.problems == []
    assert cell_metrics(data).empty
