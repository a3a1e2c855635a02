"""Read a sweep directory's Parquet files into DataFrames, one bad file never stopping the rest.

`analysis` reads only files (the sweep directory contract); it imports nothing from the
orchestrator. A missing or unreadable file is reported on stderr with its path and skipped:
on a shared filesystem a half-finished sweep is normal, and one broken cell should not hide
the others.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from workloads.schema import CONFIG_FILE, RUN_FILE, RUN_SCHEMA, STEPS_FILE, STEPS_SCHEMA

CELLS_DIR = "cells"


def read_parquet(path: Path, schema: pa.Schema, warn: TextIO | None = sys.stderr) -> pd.DataFrame | None:
    """The file as a DataFrame of `schema`'s columns; None (and a line on `warn`) if unreadable.

    Missing files give None silently: the caller knows whether absence is expected.
    Columns added to the schema after the file was written come back as nulls.
    """
    if not path.exists():
        return None
    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for truncated/garbage files
        if warn is not None:
            print(f"warning: cannot read {path}: {exc}", file=warn)
        return None
    for name in schema.names:
        if name not in table.column_names:
            table = table.append_column(name, pa.nulls(len(table), schema.field(name).type))
    return table.select(schema.names).to_pandas()


def read_cell_config(cell_dir: Path, warn: TextIO | None = sys.stderr) -> dict[str, Any]:
    """The cell's config.yaml as a dict ({} if absent or unreadable)."""
    path = cell_dir / CONFIG_FILE
    if not path.exists():
        return {}
    try:
        values = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        if warn is not None:
            print(f"warning: cannot read {path}: {exc}", file=warn)
        return {}
    return values if isinstance(values, dict) else {}


def latest_run(runs: pd.DataFrame | None) -> pd.Series | None:
    """The attempt that speaks for a cell: the last completed one, else the last one."""
    if runs is None or runs.empty:
        return None
    runs = runs.sort_values("attempt", kind="stable")
    completed = runs[runs["status"] == "completed"]
    return (completed if not completed.empty else runs).iloc[-1]


@dataclass
class CellData:
    """What one cell directory holds; `run` is None when the cell has no readable result."""

    cell_id: str
    path: Path
    config: dict[str, Any]
    run: pd.Series | None = None
    steps: pd.DataFrame | None = field(default=None, repr=False)
    """Steps of `run`'s attempt only."""
    problem: str | None = None
    """Why there is no result: `no_result` (not run yet, or died before writing one) or `unreadable`."""


def read_cell(cell_dir: Path, warn: TextIO | None = sys.stderr) -> CellData:
    """Read one cell directory: config, the attempt that counts, and that attempt's steps."""
    cell = CellData(cell_id=cell_dir.name, path=cell_dir, config=read_cell_config(cell_dir, warn))
    run_path = cell_dir / RUN_FILE
    runs = read_parquet(run_path, RUN_SCHEMA, warn)
    if runs is None or runs.empty:
        cell.problem = "unreadable" if run_path.exists() else "no_result"
        if cell.problem == "no_result" and warn is not None:
            print(f"warning: no result yet: {run_path}", file=warn)
        return cell
    cell.run = latest_run(runs)
    steps_path = cell_dir / STEPS_FILE
    steps = read_parquet(steps_path, STEPS_SCHEMA, warn)
    if steps is None:
        # A cell that failed while building has no steps; a completed one should have them.
        if cell.run["status"] == "completed" and not steps_path.exists() and warn is not None:
            print(f"warning: completed cell without steps: {steps_path}", file=warn)
        return cell
    cell.steps = steps[steps["attempt"] == cell.run["attempt"]]
    return cell


def cell_dirs(sweep_dir: Path) -> list[Path]:
    """The cell directories of a sweep, sorted by name (= cell id)."""
    root = Path(sweep_dir) / CELLS_DIR
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir())


def read_sweep(sweep_dir: Path, warn: TextIO | None = sys.stderr) -> list[CellData]:
    """Every cell of a sweep directory (results or not)."""
    return [read_cell(path, warn) for path in cell_dirs(sweep_dir)]
