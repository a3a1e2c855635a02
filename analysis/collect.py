"""Read a sweep directory's files into two DataFrames, one bad file never stopping the rest.

`analysis` reads only files (the sweep directory contract); it imports nothing from the
orchestrator. All `run.parquet` files of a sweep are read in one `pyarrow.dataset` scan, and all
`steps.parquet` files in another (threads, one pass). A file that cannot be read — half-written
by a copy that bypassed the atomic rename, truncated, not Parquet at all — fails such a scan, so
then the files are read one by one and the bad ones reported with their path. A missing
manifest, a cell without a result and a completed cell without steps are reported too: on a
shared filesystem a half-finished sweep is normal, and one broken cell should not hide the rest.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, TextIO

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import yaml

from workloads.schema import CONFIG_FILE, RUN_FILE, RUN_SCHEMA, STEPS_FILE, STEPS_SCHEMA

CELLS_DIR = "cells"
#: The columns analysis reads of each file (a run row has 50: decoding the environment columns
#: would cost a third of the time in a large sweep, and no table shows them).
RUN_READ_SCHEMA = pa.schema([RUN_SCHEMA.field(name) for name in (
    "cell_id", "attempt", "status", "error", "model", "arch", "size", "backend", "compile_mode", "precision",
    "data_source", "seed", "batch_size", "grad_accum", "items_per_step", "measured_steps", "median_step_ms",
    "mean_step_ms", "std_step_ms", "items_per_s", "mfu", "device", "gpu_name", "compile_time_s", "first_step_ms",
    "graph_count", "graph_break_count", "recompile_count", "peak_mem_bytes", "world_size", "nodes", "dist_backend",
    "ddp_graph_splits", "rank_median_step_ms")])
#: What a run row of schema version 1 (before distributed cells) lacks: it ran one process on one node.
SINGLE_PROCESS = {"world_size": 1, "nodes": 1}
STEPS_READ_SCHEMA = pa.schema([STEPS_SCHEMA.field(name) for name in (
    "cell_id", "attempt", "step", "phase", "step_time_ms", "data_time_ms", "loss", "mfu")])
MANIFEST_FILE = "manifest.parquet"
#: Statuses of cells that have no readable result (besides the workload's STATUSES).
NO_RESULT, UNREADABLE = "no_result", "unreadable"
#: libyaml's parser where PyYAML has it; configs are read only for cells without a result.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Stderr:
    """sys.stderr as it is when written to (a default argument would keep the one of import time,
    which a test's capture or a redirection may have replaced since)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)


#: Where warnings go unless told otherwise (`warn=None`: nowhere).
STDERR: TextIO = _Stderr()  # type: ignore[assignment]


@dataclass(frozen=True)
class Problem:
    """Something in the sweep directory that could not be analysed, and where."""

    path: Path
    message: str

    def __str__(self) -> str:
        return f"{self.message}: {self.path}"


class _Problems(list):
    """Problems as they are found, each also printed as a warning line on `warn`."""

    def __init__(self, warn: TextIO | None):
        super().__init__()
        self.warn = warn

    def add(self, path: Path, message: str) -> None:
        self.append(Problem(Path(path), message))
        if self.warn is not None:
            print(f"warning: {message}: {path}", file=self.warn)


def read_tables(paths: Sequence[Path], schema: pa.Schema) -> tuple[pa.Table, list[tuple[Path, Exception]]]:
    """The files as one table of `schema` (columns a file lacks come back null, columns `schema`
    lacks are not read), and the files that could not be read, with their error."""
    if not paths:
        return schema.empty_table(), []
    scan = lambda files: ds.dataset([str(p) for p in files], schema=schema, format="parquet").to_table()  # noqa: E731
    try:
        return scan(paths), []
    except Exception:  # pyarrow raises several types for truncated or garbage files
        pass
    tables, bad = [], []
    for path in paths:  # one bad file fails the whole scan: find it, keep the others
        try:
            tables.append(scan([path]))
        except Exception as exc:
            bad.append((Path(path), exc))
    return (pa.concat_tables(tables) if tables else schema.empty_table()), bad


def read_parquet(path: Path, schema: pa.Schema, warn: TextIO | None = STDERR) -> pd.DataFrame | None:
    """The file as a DataFrame of `schema`'s columns; None (and a line on `warn`) if unreadable.

    Missing files give None silently: the caller knows whether absence is expected.
    Columns added to the schema after the file was written come back as nulls.
    """
    if not Path(path).exists():
        return None
    table, bad = read_tables([path], schema)
    for bad_path, exc in bad:
        if warn is not None:
            print(f"warning: cannot read {bad_path}: {exc}", file=warn)
        return None
    return table.to_pandas()


def read_cell_config(cell_dir: Path, warn: TextIO | None = STDERR) -> dict[str, Any]:
    """The cell's config.yaml as a dict ({} if absent or unreadable)."""
    path = Path(cell_dir) / CONFIG_FILE
    if not path.exists():
        return {}
    try:
        values = yaml.load(path.read_text(), Loader=_YAML_LOADER)
    except (OSError, yaml.YAMLError) as exc:
        if warn is not None:
            print(f"warning: cannot read {path}: {exc}", file=warn)
        return {}
    return values if isinstance(values, dict) else {}


def axes_from_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The run-row axes of a cell known only by its config.yaml (not run yet, or unreadable)."""

    def sub(key: str, name: str) -> Any:
        value = config.get(key)
        return value.get(name) if isinstance(value, Mapping) else None

    # A one-process cell's config has no `distributed` section (so that its id stays what it was).
    nodes, per_node = (sub("distributed", key) or 1 for key in ("nodes", "tasks_per_node"))
    return {
        "model": sub("model", "name"), "arch": sub("model", "arch"), "size": config.get("size"),
        "backend": sub("backend", "name"), "compile_mode": sub("backend", "mode"),
        "precision": sub("precision", "name"), "batch_size": config.get("batch_size"),
        "grad_accum": config.get("grad_accum"), "data_source": sub("data", "source"),
        "seed": config.get("seed"), "world_size": nodes * per_node, "nodes": nodes,
    }  # fmt: skip


def counting_attempts(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per cell_id: the attempt that speaks for the cell, i.e. the last completed one,
    else the last one."""
    ranked = runs.assign(_completed=runs["status"] == "completed")
    ranked = ranked.sort_values(["cell_id", "_completed", "attempt"], kind="stable")
    return ranked.drop_duplicates("cell_id", keep="last").drop(columns="_completed")


def latest_run(runs: pd.DataFrame | None) -> pd.Series | None:
    """The attempt that speaks for a cell (its runs only): see `counting_attempts`."""
    if runs is None or runs.empty:
        return None
    return counting_attempts(runs).iloc[0]


@dataclass
class SweepData:
    """A sweep (or part of one) as frames.

    `cells`: one row per cell with RUN_READ_SCHEMA's columns, from the attempt that counts; a
    cell without a readable result has its axes (from config.yaml, else the manifest) and status
    `no_result` or `unreadable`. `steps`: STEPS_READ_SCHEMA's columns of exactly those attempts.
    """

    cells: pd.DataFrame
    steps: pd.DataFrame
    problems: list[Problem] = field(default_factory=list)

    @classmethod
    def concat(cls, parts: Iterable[SweepData]) -> SweepData:
        """Several parts (e.g. one per cell) as one."""
        parts = list(parts)
        return cls(_concat([p.cells for p in parts], RUN_READ_SCHEMA),
                   _concat([p.steps for p in parts], STEPS_READ_SCHEMA),
                   [problem for part in parts for problem in part.problems])


def _concat(frames: list[pd.DataFrame], schema: pa.Schema) -> pd.DataFrame:
    """The non-empty frames as one (concatenating empty frames would blur the column types)."""
    frames = [frame for frame in frames if not frame.empty]
    return pd.concat(frames, ignore_index=True) if frames else schema.empty_table().to_pandas()


def cell_dirs(sweep_dir: Path) -> list[Path]:
    """The cell directories of a sweep, sorted by name (= cell id)."""
    root = Path(sweep_dir) / CELLS_DIR
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir())


#: The columns of manifest.parquet (orchestrator/sweep_dir.py writes it) that are run-row axes.
_MANIFEST_SCHEMA = pa.schema([f for f in RUN_SCHEMA if f.name in ("cell_id", "model", "size", "backend",
                                                                   "compile_mode", "precision")])


def _read_manifest(path: Path, problems: _Problems) -> dict[str, dict[str, Any]]:
    """{cell_id: axes} of manifest.parquet; {} when it is unreadable."""
    table, bad = read_tables([path], _MANIFEST_SCHEMA)
    for bad_path, exc in bad:
        problems.add(bad_path, f"cannot read ({exc})")
    return {row.pop("cell_id"): row for row in table.to_pylist()}


def _without_result(directories: Sequence[Path], runs: pd.DataFrame, unreadable: set[Path],
                    manifest: Mapping[str, Mapping[str, Any]], problems: _Problems,
                    warn: TextIO | None) -> pd.DataFrame:
    """Rows for the cells that have no readable run row: axes from config.yaml, else the manifest."""
    rows = []
    for directory in directories:
        if directory.name in runs.index:
            continue
        path = directory / RUN_FILE
        if not directory.is_dir():
            problems.add(directory, "in the manifest, no cell directory")
        elif path.is_file() and path not in unreadable:
            problems.add(path, "no rows")
        elif not path.is_file():
            problems.add(path, "no result yet")
        axes = axes_from_config(read_cell_config(directory, warn)) if directory.is_dir() else {}
        known = {**manifest.get(directory.name, {}), **{k: v for k, v in axes.items() if v is not None}}
        rows.append({**known, "cell_id": directory.name, "status": UNREADABLE if path in unreadable else NO_RESULT})
    return pd.DataFrame(rows, columns=RUN_READ_SCHEMA.names)


def _counting_steps(directories: Sequence[Path], runs: pd.DataFrame, problems: _Problems) -> pd.DataFrame:
    """The steps of each cell's attempt that counts (not those of its other attempts)."""
    paths = []
    for directory in directories:
        path = directory / STEPS_FILE
        if path.is_file():
            paths.append(path)
        elif directory.name in runs.index and runs.at[directory.name, "status"] == "completed":
            problems.add(path, "completed cell without steps")
    table, bad = read_tables(paths, STEPS_READ_SCHEMA)
    for path, exc in bad:
        problems.add(path, f"cannot read ({exc})")
    steps = table.to_pandas(strings_to_categorical=True)  # a million rows name a thousand cells
    counting = steps["cell_id"].map(runs["attempt"]).to_numpy(float)
    return steps[counting == steps["attempt"].to_numpy()].reset_index(drop=True)


def load_cells(directories: Sequence[Path], warn: TextIO | None = STDERR,
               manifest: Mapping[str, Mapping[str, Any]] | None = None,
               problems: _Problems | None = None) -> SweepData:
    """Read these cell directories (some may not exist yet: then `manifest` gives their axes)."""
    problems = problems if problems is not None else _Problems(warn)
    table, bad = read_tables([d / RUN_FILE for d in directories if (d / RUN_FILE).is_file()], RUN_READ_SCHEMA)
    for path, exc in bad:
        problems.add(path, f"cannot read ({exc})")
    runs = counting_attempts(table.to_pandas().fillna(SINGLE_PROCESS)).set_index("cell_id", drop=False)
    missing = _without_result(directories, runs, {path for path, _ in bad}, manifest or {}, problems, warn)
    cells = runs.reset_index(drop=True) if missing.empty else pd.concat([runs, missing], ignore_index=True)
    return SweepData(cells, _counting_steps(directories, runs, problems), list(problems))


def read_cell(cell_dir: Path, warn: TextIO | None = STDERR) -> SweepData:
    """One cell directory: its attempt that counts and that attempt's steps."""
    return load_cells([Path(cell_dir)], warn)


def load_sweep(sweep_dir: Path, warn: TextIO | None = STDERR) -> SweepData:
    """Every cell of a sweep directory: those on disk and those the manifest lists."""
    sweep_dir = Path(sweep_dir)
    problems = _Problems(warn)
    on_disk = [d.name for d in cell_dirs(sweep_dir)]
    manifest_path = sweep_dir / MANIFEST_FILE
    if manifest_path.exists():
        manifest = _read_manifest(manifest_path, problems)
    else:
        manifest = {}
        if on_disk:
            problems.add(manifest_path, "no manifest (cells found in cells/ only)")
    ids = sorted(set(on_disk) | set(manifest))
    return load_cells([sweep_dir / CELLS_DIR / cell_id for cell_id in ids], warn, manifest, problems)
