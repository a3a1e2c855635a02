"""Old sweep directories, read through the one upgrade path (workloads/contract/upgrade.py).

The old sweep is written as its commits wrote it: real Parquet files with the columns of schema
version 1 (aca78a6, the first workload) and of version 2 as 723a086 left it (before replicates,
end-to-end columns, provenance, reasons and compile caches), and that commit's manifest. `analyze`
and `status` must give what they give for the same rows written in the current format; each lift
step has its own test."""

from __future__ import annotations

import ast
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from analysis.cells.metrics import cell_metrics
from analysis.reading.collect import load_sweep
from orchestrator.cli.main import main
from orchestrator.executors.status import sweep_status
from orchestrator.sweep.tables import status_table
from workloads.contract.attempts import last_status, missing_repeats, record_killed_attempt
from workloads.contract.schema import (
    MANIFEST_SCHEMA,
    RUN_SCHEMA,
    SCHEMA_VERSION,
    STEPS_SCHEMA,
    append_rows_atomic,
    table_from_rows,
)
from workloads.contract.sweep_dir import RUN_FILE, read_files
from workloads.contract.upgrade import lift
from workloads.contract.vocabulary import COMPLETED, NOT_RUN

ROOT = Path(__file__).resolve().parents[3]
#: run.parquet's columns at 723a086 (schema version 2, distributed cells), in its order.
RUN_723A086 = (
    "cell_id", "attempt", "status", "error", "model", "arch", "size", "backend", "compile_mode", "fullgraph",
    "regional", "compile_optimizer", "precision", "data_source", "seed", "batch_size", "grad_accum",
    "items_per_step", "warmup_steps", "measured_steps", "params", "flops_per_step", "peak_tflops",
    "median_step_ms", "mean_step_ms", "std_step_ms", "items_per_s", "mfu", "device", "gpu_name",
    "compile_time_s", "first_step_ms", "graph_count", "graph_break_count", "recompile_count",
    "cudagraph_skips", "peak_mem_bytes", "world_size", "nodes", "dist_backend", "ddp_graph_splits",
    "rank_hostname", "rank_median_step_ms", "rank_compile_time_s", "rank_peak_mem_bytes", "torch_version",
    "triton_version", "cuda_version", "timm_version", "hostname", "slurm_job_id", "slurm_array_task_id",
    "partition", "started_at", "finished_at", "git_sha", "schema_version",
)  # fmt: skip
#: What version 2 added to run.parquet, and cudagraph_skips (990d346): aca78a6's columns are the rest.
ADDED_AFTER_ACA78A6 = (
    "cudagraph_skips", "world_size", "nodes", "dist_backend", "ddp_graph_splits", "rank_hostname",
    "rank_median_step_ms", "rank_compile_time_s", "rank_peak_mem_bytes",
)  # fmt: skip
RANK_STEP_COLUMNS = ("rank_step_time_ms", "rank_data_time_ms")
STEPS_723A086 = (*STEPS_SCHEMA.names[:10], *RANK_STEP_COLUMNS)
#: manifest.parquet at 723a086 (orchestrator/sweep_dir.py).
MANIFEST_723A086 = (
    "cell_id", "model", "size", "backend", "compile_mode", "precision", "overrides", "executor", "job_id",
)  # fmt: skip


def typed(names: tuple[str, ...], kind: pa.Schema) -> pa.Schema:
    """The old columns with their types (no column has changed its type: the current schema's)."""
    return pa.schema([kind.field(name) for name in names])


V1_RUN = typed(tuple(n for n in RUN_723A086 if n not in ADDED_AFTER_ACA78A6), RUN_SCHEMA)
V1_STEPS = typed(STEPS_723A086[:10], STEPS_SCHEMA)
V2_RUN, V2_STEPS = typed(RUN_723A086, RUN_SCHEMA), typed(STEPS_723A086, STEPS_SCHEMA)
V2_MANIFEST = typed(MANIFEST_723A086, MANIFEST_SCHEMA)


def schema_at(commit: str, path: str, name: str) -> pa.Schema:
    """The schema `name` as the file at `commit` defined it (skips where the clone lacks history)."""
    shown = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, text=True)
    if shown.returncode:
        pytest.skip(f"no git history here ({shown.stderr.strip()})")
    tree = ast.parse(shown.stdout)
    (value,) = [n.value for n in tree.body if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == name]
    return eval(compile(ast.Expression(value), path, "eval"), {"pa": pa})


@pytest.mark.parametrize(
    "ours, commit, path, name",
    [
        (V1_RUN, "aca78a6", "workloads/schema.py", "RUN_SCHEMA"),
        (V1_STEPS, "aca78a6", "workloads/schema.py", "STEPS_SCHEMA"),
        (V2_RUN, "723a086", "workloads/schema.py", "RUN_SCHEMA"),
        (V2_STEPS, "723a086", "workloads/schema.py", "STEPS_SCHEMA"),
        (V2_MANIFEST, "723a086", "orchestrator/sweep_dir.py", "MANIFEST_SCHEMA"),
    ],
)
def test_the_old_columns_are_those_the_commits_wrote(
    ours: pa.Schema, commit: str, path: str, name: str
) -> None:
    assert ours.equals(schema_at(commit, path, name))


# The sweep: v1 cells of size tiny, v2 cells of size small (each size its own eager baseline).
ITEMS = 1000
START = datetime(2026, 11, 21, 16, 0, tzinfo=timezone.utc)


def steps_ms(base: float, n: int = 20) -> list[float]:
    return [base + 0.1 * (i % 5) for i in range(n)]


def run_row(cell_id: str, backend: str, size: str, version: int, **values: Any) -> dict[str, Any]:
    return {
        "cell_id": cell_id, "attempt": 1, "status": "completed", "model": "gpt", "size": size,
        "backend": backend, "compile_mode": None if backend == "eager" else "default", "precision": "bf16",
        "data_source": "synthetic", "seed": 1337, "batch_size": 8, "grad_accum": 1, "items_per_step": ITEMS,
        "warmup_steps": 2, "device": "cpu", "compile_time_s": None if backend == "eager" else 3.5,
        "hostname": "node1", "started_at": START, "finished_at": START, "git_sha": "723a086",
        "schema_version": version, **values,
    }  # fmt: skip


def summary(measured: list[float]) -> dict[str, Any]:
    """The run row's step summary, as the workload computed it."""
    series = pd.Series(measured)
    median = float(series.median())
    return {
        "measured_steps": len(measured), "median_step_ms": median, "mean_step_ms": float(series.mean()),
        "std_step_ms": float(series.std()), "items_per_s": ITEMS / (median / 1e3),
    }  # fmt: skip


def step_rows(cell_id: str, measured: list[float], ranks: int | None) -> list[dict[str, Any]]:
    """Two warm-up steps, then the measured ones; `ranks`: the rank lists of version 2 (None: v1)."""
    times = [5000.0, 900.0, *measured]
    rows = []
    for i, ms in enumerate(times):
        row = {"cell_id": cell_id, "attempt": 1, "step": i, "phase": "warmup" if i < 2 else "measure",
               "step_time_ms": ms, "data_time_ms": 0.0, "loss": 5.0 - 0.01 * i, "items": ITEMS}  # fmt: skip
        if ranks is not None:
            row |= {"rank_step_time_ms": [ms] * ranks, "rank_data_time_ms": [0.0] * ranks}
        rows.append(row)
    return rows


def old_cells() -> list[tuple[dict[str, Any], list[dict[str, Any]] | None]]:
    """(run row, step rows or None) of each attempt, as the old writers left them."""
    cells = []
    for cell_id, backend, base in (("v1-eager", "eager", 10.0), ("v1-inductor", "inductor", 8.0)):
        measured = steps_ms(base)
        cells.append(
            (run_row(cell_id, backend, "tiny", 1, **summary(measured)), step_rows(cell_id, measured, None))
        )
    one = {"world_size": 1, "nodes": 1, "rank_hostname": ["node1"]}
    cells.append(
        (run_row("v2-eager", "eager", "small", 2, status="oom", error="CUDA out of memory", **one), None)
    )
    for cell_id, backend, base, ranks in (
        ("v2-eager", "eager", 20.0, 1),
        ("v2-inductor", "inductor", 16.0, 1),
        ("v2-ddp", "inductor", 18.0, 2),
    ):
        measured = steps_ms(base)
        row = run_row(
            cell_id, backend, "small", 2, attempt=2 if cell_id == "v2-eager" else 1, **summary(measured),
            world_size=ranks, nodes=1, items_per_step=ITEMS * ranks,
            dist_backend="gloo" if ranks > 1 else None,
            rank_median_step_ms=[summary(measured)["median_step_ms"] * (1 + 0.05 * r) for r in range(ranks)],
        )  # fmt: skip
        steps = step_rows(cell_id, measured, ranks)
        for step in steps:
            step |= {"attempt": row["attempt"], "items": ITEMS * ranks}
        cells.append((row, steps))
    # Completed, but its steps file is gone: analysis falls back on the run row's summary.
    cells.append((run_row("v2-nosteps", "aot_eager", "small", 2, **summary(steps_ms(19.0)), **one), None))
    cells.append(
        (
            run_row("v2-failed", "inductor", "small", 2, status="failed", error="RuntimeError: boom", **one),
            None,
        )
    )
    return cells


def as_now(row: dict[str, Any]) -> dict[str, Any]:
    """The same run row as the current writer records it."""
    measured_s = row["mean_step_ms"] * row["measured_steps"] / 1e3 if row.get("mean_step_ms") else None
    return {
        **row, "repeat": 0, "schema_version": SCHEMA_VERSION, "world_size": row.get("world_size", 1),
        "nodes": row.get("nodes", 1), "measured_s": measured_s,
        "e2e_items_per_s": row["items_per_step"] * row["measured_steps"] / measured_s if measured_s else None,
    }  # fmt: skip


def write(path: Path, rows: list[dict[str, Any]], schema: pa.Schema) -> None:
    """Append rows to a Parquet file of `schema`, as every writer of these versions did."""
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=schema)
    if path.exists():
        table = pa.concat_tables([pq.read_table(path), table])
    pq.write_table(table, path)


def write_sweep(sweep: Path, current: bool) -> Path:
    """The sweep in the old format (current=False) or the same rows in the current one."""
    manifest = []
    for row, steps in old_cells():
        directory = sweep / "cells" / row["cell_id"]
        old_run, old_steps = (V1_RUN, V1_STEPS) if row["schema_version"] == 1 else (V2_RUN, V2_STEPS)
        write(directory / RUN_FILE, [as_now(row) if current else row], RUN_SCHEMA if current else old_run)
        if steps is not None:
            write(directory / "steps.parquet", steps, STEPS_SCHEMA if current else old_steps)
        config = {"model": {"name": "gpt"}, "size": row["size"], "backend": {"name": row["backend"]}}
        (directory / "config.yaml").write_text(yaml.safe_dump(config))
        if row["cell_id"] not in {m["cell_id"] for m in manifest}:
            axes = {name: row[name] for name in ("model", "size", "backend", "compile_mode", "precision")}
            manifest.append(
                {"cell_id": row["cell_id"], **axes, "overrides": f"size={row['size']}", "executor": "local"}
            )
    manifest.append(
        {"cell_id": "v2-queued", "model": "gpt", "size": "small", "backend": "inductor", "executor": "local"}
    )
    write(sweep / "manifest.parquet", manifest, MANIFEST_SCHEMA if current else V2_MANIFEST)
    return sweep


@pytest.fixture
def sweeps(tmp_path: Path) -> tuple[Path, Path]:
    return write_sweep(tmp_path / "old", current=False), write_sweep(tmp_path / "new", current=True)


def test_the_fixture_is_in_the_old_format(sweeps: tuple[Path, Path]) -> None:
    old, _ = sweeps
    assert pq.read_schema(old / "cells" / "v1-eager" / RUN_FILE).names == V1_RUN.names
    assert pq.read_schema(old / "cells" / "v2-eager" / RUN_FILE).names == V2_RUN.names
    assert pq.read_schema(old / "manifest.parquet").names == V2_MANIFEST.names


def analyze(capsys: pytest.CaptureFixture[str], sweep: Path, fmt: str) -> tuple[str, str]:
    main(["analyze", str(sweep), "--format", fmt, "--no-plots"])
    out, err = capsys.readouterr()
    return out, err.replace(str(sweep), "SWEEP")


@pytest.mark.parametrize("fmt", ["markdown", "csv"])
def test_analyze_gives_the_old_sweep_the_numbers_of_the_new_format(
    sweeps: tuple[Path, Path], capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    old, new = sweeps
    assert analyze(capsys, old, fmt) == analyze(capsys, new, fmt)
    for table in ("summary", "environment"):
        name = f"report/tables/{table}.csv"
        assert (old / name).read_text() == (new / name).read_text()


def test_the_old_sweep_s_metrics(sweeps: tuple[Path, Path]) -> None:
    old, new = sweeps
    metrics = cell_metrics(load_sweep(old, warn=None))
    pd.testing.assert_frame_equal(metrics, cell_metrics(load_sweep(new, warn=None)))
    rows = metrics.set_index("cell_id")
    assert list(rows.loc[["v1-eager", "v1-inductor"], "world_size"]) == [1, 1]  # version 1: one process
    assert rows.loc["v1-inductor", "speedup"] == pytest.approx(10.2 / 8.2)
    assert rows.loc["v2-ddp", "scaling_baseline_cell_id"] == "v2-inductor"
    assert rows.loc["v2-ddp", "rank_imbalance"] == pytest.approx(0.05)
    nosteps = rows.loc["v2-nosteps"]
    assert nosteps["e2e_items_per_s"] == pytest.approx(ITEMS / (nosteps["mean_step_ms"] / 1e3))
    assert rows.loc["v2-failed", "status"] == "failed" and rows.loc["v2-queued", "status"] == "no_result"


def test_status_reads_the_old_sweep(sweeps: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    old, new = sweeps
    states = {row.cell_id: row.state for row in sweep_status(old)}
    assert states == {
        "v1-eager": COMPLETED, "v1-inductor": COMPLETED, "v2-eager": COMPLETED, "v2-inductor": COMPLETED,
        "v2-ddp": COMPLETED, "v2-nosteps": COMPLETED, "v2-failed": "failed", "v2-queued": NOT_RUN,
    }  # fmt: skip
    assert status_table(sweep_status(old)) == status_table(sweep_status(new))
    printed = []
    for sweep in (old, new):
        printed.append((main(["status", str(sweep)]), capsys.readouterr().out))
    assert printed[0] == printed[1] and "RuntimeError: boom" in printed[0][1]


def test_the_orchestrator_reads_an_old_cell_s_replicates(sweeps: tuple[Path, Path]) -> None:
    """A cell of version 1 is done; one more attempt recorded by today's writer reads beside it."""
    directory = sweeps[0] / "cells" / "v1-eager"
    assert missing_repeats(directory) == [] and last_status(directory) == (1, "completed", None)
    record_killed_attempt(directory, "v1-eager", 1, "oom", "killed", START)
    assert missing_repeats(directory, 2) == [1]
    assert last_status(directory, 2) == (2, "oom", "killed")


# Each lift step, on run rows as an older writer left them (read with the current columns).


def lifted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return lift(table_from_rows(rows, RUN_SCHEMA), RUN_SCHEMA).to_pylist()


def test_version_1_rows_ran_one_process() -> None:
    v1, v1_unversioned, v2 = lifted([
        {"schema_version": 1}, {"schema_version": None}, {"schema_version": 2, "world_size": None},
    ])  # fmt: skip
    assert (
        (v1["world_size"], v1["nodes"]) == (1, 1) == (v1_unversioned["world_size"], v1_unversioned["nodes"])
    )
    assert v2["world_size"] is None  # a row of version 2 without it does not say


def test_rows_before_replicates_are_replicate_0() -> None:
    assert [row["repeat"] for row in lifted([{"repeat": None}, {"repeat": 3}])] == [0, 3]


def test_rows_before_the_end_to_end_columns_have_it_at_their_mean_step() -> None:
    before, now, not_measured = lifted([
        {"items_per_step": 1000, "mean_step_ms": 20.0},
        {"items_per_step": 1000, "mean_step_ms": 20.0, "measured_s": 0.0},  # its writer found no span
        {"items_per_step": 1000},
    ])  # fmt: skip
    assert before["e2e_items_per_s"] == pytest.approx(50_000.0)
    assert now["e2e_items_per_s"] is None and not_measured["e2e_items_per_s"] is None


def test_rows_before_the_gpu_time_have_it_from_their_window_s_busy_share() -> None:
    """The issue's gpt small inductor cell: its one window's busy share times its span per step."""
    before, now, none = lifted([
        {"gpu_busy_share": 0.5, "profiled_step_ms": 11.2,
         "eager_gpu_busy_share": 0.4, "eager_profiled_step_ms": 18.6},
        {"gpu_busy_share": 0.5, "profiled_step_ms": 11.2, "gpu_ms_per_step": 5.5},
        {"profiled_step_ms": 11.2},  # no device activity in the window
    ])  # fmt: skip
    assert before["gpu_ms_per_step"] == pytest.approx(5.6) and before[
        "eager_gpu_ms_per_step"
    ] == pytest.approx(7.44)
    assert before["launches_per_step"] is None and before["gpu_ms_windows"] is None
    assert now["gpu_ms_per_step"] == 5.5 and now["eager_gpu_ms_per_step"] is None
    assert none["gpu_ms_per_step"] is None


def test_steps_and_manifest_files_only_gain_null_columns(tmp_path: Path) -> None:
    write(tmp_path / "steps.parquet", step_rows("c", [10.0], None), V1_STEPS)
    write(tmp_path / "manifest.parquet", [{"cell_id": "c", "model": "gpt", "executor": "local"}], V2_MANIFEST)
    (steps, _), (manifest, _) = (
        read_files([tmp_path / "steps.parquet"], STEPS_SCHEMA),
        read_files([tmp_path / "manifest.parquet"], MANIFEST_SCHEMA),
    )
    assert steps.schema.equals(STEPS_SCHEMA) and steps.column("rank_step_time_ms").null_count == 3
    assert manifest.schema.equals(MANIFEST_SCHEMA) and manifest.column("seed").to_pylist() == [None]


def test_a_reader_of_some_columns_gets_them_lifted(tmp_path: Path) -> None:
    """The lift's inputs are read even where the reader asked for other columns only."""
    path = tmp_path / RUN_FILE
    write(path, [run_row("c", "eager", "tiny", 1, **summary([10.0, 12.0]))], V1_RUN)
    table, bad = read_files([path], RUN_SCHEMA, ["cell_id", "world_size", "repeat", "e2e_items_per_s"])
    assert bad == [] and table.to_pylist() == [
        {"cell_id": "c", "world_size": 1, "repeat": 0, "e2e_items_per_s": pytest.approx(ITEMS / 0.011)}
    ]
    append_rows_atomic(path, [{"cell_id": "c", "attempt": 2, "schema_version": SCHEMA_VERSION}], RUN_SCHEMA)
    table, _ = read_files([path], RUN_SCHEMA, ["attempt", "world_size"])
    assert table.to_pylist() == [{"attempt": 1, "world_size": 1}, {"attempt": 2, "world_size": None}]
