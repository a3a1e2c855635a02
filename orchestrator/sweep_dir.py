"""Lay a grid out in its sweep directory (one resolved config per cell and the manifest), and read it back.

Layout (DESIGN.md, "Sweep directory"): `SWEEP_DIR/manifest.parquet`,
`SWEEP_DIR/cells/<cell_id>/config.yaml`, and the cell's `logs/`. Everything is written through
a temporary file and a rename, so a job reading its config never sees half of it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import pyarrow as pa
import yaml

from analysis.collect import CELLS_DIR, MANIFEST_FILE, cell_dirs, latest_run, read_cell_config, read_parquet
from workloads.schema import (
    CONFIG_FILE, RUN_FILE, RUN_SCHEMA, atomic_output, table_from_rows, write_parquet_atomic,
)

if TYPE_CHECKING:  # grid imports Hydra and the workloads (torch): a Slurm task needs neither
    from orchestrator.grid import Cell, Grid

MANIFEST_LOCK = ".manifest.lock"
LOGS_DIR = "logs"
#: libyaml's emitter where PyYAML was built with it (the same YAML, ~20x faster than the
#: pure-Python one, which dominated a 10,000-cell dry-run).
_YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

MANIFEST_SCHEMA = pa.schema(
    [
        ("cell_id", pa.string()),
        ("model", pa.string()),
        ("size", pa.string()),
        ("backend", pa.string()),
        ("compile_mode", pa.string()),
        ("precision", pa.string()),
        ("overrides", pa.string()),  # the cell's Hydra overrides, space-separated
        ("executor", pa.string()),  # local | slurm
        ("job_id", pa.string()),  # scheduler job id; null when run locally
    ]
)


class SweepDirError(ValueError):
    """A sweep directory that cannot be read back into its grid; the message is one line."""


#: What a sweep directory may hold at its top level (SBATCH_DIR of orchestrator/slurm.py, submitit's
#: folder, the smoke sweep, analysis' report); anything else means it is somebody else's directory.
SWEEP_ENTRIES = frozenset({MANIFEST_FILE, CELLS_DIR, "sbatch", "submitit", "smoke", "report"})


def check_sweep_dir(sweep_dir: Path) -> None:
    """SweepDirError unless `sweep_dir` is new, empty, or a sweep directory (a sweep writes
    cells/, a manifest and scripts into it, and never into a home or data directory by mistake)."""
    path = Path(sweep_dir)
    if not path.exists():
        return
    if not path.is_dir():
        raise SweepDirError(f"hydra.sweep.dir={path} is a file, not a directory")
    # Hidden names are left alone: ours are temporary files of atomic writes (.manifest.parquet.*.tmp).
    foreign = sorted(e.name for e in path.iterdir() if e.name not in SWEEP_ENTRIES and not e.name.startswith("."))
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise SweepDirError(f"hydra.sweep.dir={path} is not a compilebench sweep directory (it holds {shown}); "
                            "choose a new or empty directory")


def cell_dir(sweep_dir: Path, cell_id: str) -> Path:
    return Path(sweep_dir) / CELLS_DIR / cell_id


def config_path(sweep_dir: Path, cell_id: str) -> Path:
    return cell_dir(sweep_dir, cell_id) / CONFIG_FILE


def write_cell_config(sweep_dir: Path, cell: Cell) -> Path:
    """Write the cell's resolved config (rewritten each time: the cluster part may change)."""
    path = config_path(sweep_dir, cell.cell_id)
    with atomic_output(path) as fh:
        fh.write(yaml.dump(cell.config, Dumper=_YAML_DUMPER, sort_keys=False).encode())
    return path


def manifest_rows(grid: Grid, job_ids: dict[str, str] | None = None) -> list[dict[str, Any]]:
    job_ids = job_ids or {}
    return [
        {
            "cell_id": cell.cell_id,
            **cell.axes,  # the columns of orchestrator.grid.AXES
            "overrides": " ".join(cell.overrides),
            "executor": grid.executor,
            "job_id": job_ids.get(cell.cell_id),
        }
        for cell in grid.cells
    ]


@contextlib.contextmanager
def manifest_lock(sweep_dir: Path) -> Iterator[None]:
    """Hold the sweep directory's manifest lock (flock on SWEEP_DIR/.manifest.lock) for a
    read-merge-write of the manifest: two sweeps of one directory at once keep each other's rows."""
    Path(sweep_dir).mkdir(parents=True, exist_ok=True)
    with open(Path(sweep_dir) / MANIFEST_LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file is closed
        yield


def write_manifest(grid: Grid, job_ids: dict[str, str] | None = None) -> Path:
    """Write this grid's rows (in grid order) into SWEEP_DIR/manifest.parquet; the rows of other
    cells already there (an earlier sweep of another grid into this directory, or one running
    now) are kept after them."""
    path = Path(grid.sweep_dir) / MANIFEST_FILE
    rows = manifest_rows(grid, job_ids)
    ours = {row["cell_id"] for row in rows}
    with manifest_lock(grid.sweep_dir):
        old = read_parquet(path, MANIFEST_SCHEMA)
        if old is not None:
            old = old.astype(object).where(old.notna(), None)  # pandas' NaN back to null
            rows += [row for row in old.to_dict("records") if row["cell_id"] not in ours]
        write_parquet_atomic(table_from_rows(rows, MANIFEST_SCHEMA), path)
    return path


def recorded_job_ids(sweep_dir: Path) -> dict[str, str]:
    """{cell_id: job_id} of an existing manifest (cells never submitted left out); {} if none."""
    manifest = read_parquet(Path(sweep_dir) / MANIFEST_FILE, MANIFEST_SCHEMA)
    if manifest is None:
        return {}
    return {row.cell_id: row.job_id for row in manifest.itertuples() if isinstance(row.job_id, str) and row.job_id}


def prepare(grid: Grid) -> dict[str, str]:
    """Write every cell's config.yaml and the manifest; runs nothing. A scheduler's job ids
    recorded by an earlier run of the sweep are kept (and returned): they are the last job
    of each cell until a new one is submitted."""
    job_ids = recorded_job_ids(grid.sweep_dir) if grid.executor != "local" else {}
    for cell in grid.cells:
        write_cell_config(grid.sweep_dir, cell)
    write_manifest(grid, job_ids)
    return job_ids


def read_grid(sweep_dir: Path) -> Grid:
    """The grid that `prepare` laid out, read back from the files: the manifest's cells (then
    cells found only on disk), each with its config.yaml and the overrides the manifest
    recorded, and the cluster of those configs. Reading, not expanding the overrides again,
    keeps the cells what they were even if conf/ changed since. Raises SweepDirError."""
    from orchestrator.grid import Cell, Grid  # imports Hydra and torch: only where a grid is rebuilt

    sweep_dir = Path(os.path.abspath(sweep_dir))  # as expand() gives it: sbatch scripts name it
    manifest = read_parquet(sweep_dir / MANIFEST_FILE, MANIFEST_SCHEMA)
    recorded = {} if manifest is None else dict(zip(manifest["cell_id"], manifest["overrides"]))
    cell_ids = list(recorded) + [d.name for d in cell_dirs(sweep_dir) if d.name not in recorded]
    cells, clusters = [], {}
    for cell_id in cell_ids:
        config = read_cell_config(cell_dir(sweep_dir, cell_id), warn=None)
        text = recorded.get(cell_id)
        # The manifest joins the overrides with spaces; splitting on single spaces gives the same text back.
        cell = Cell(cell_id, tuple(text.split(" ")) if isinstance(text, str) and text else (), config)
        try:
            cell.axes  # noqa: B018  (raises for a config without model, backend or precision names)
        except (KeyError, TypeError, AttributeError):
            raise SweepDirError(f"cell {cell_id}: no usable config in {config_path(sweep_dir, cell_id)}") from None
        cells.append(cell)
        clusters.setdefault(json.dumps(config.get("cluster"), sort_keys=True), cell_id)
    if len(clusters) > 1:
        first, other = list(clusters.values())[:2]
        raise SweepDirError(f"cells {first} and {other} of {sweep_dir} have different cluster settings; "
                            "run `compilebench sweep` with the sweep's overrides instead")
    cluster = json.loads(next(iter(clusters))) if clusters else None
    return Grid(cells=cells, sweep_dir=sweep_dir, cluster=cluster or {})


def last_status(directory: Path) -> tuple[int, str | None, str | None]:
    """(attempts recorded, status of the attempt that counts, its error) from run.parquet."""
    runs = read_parquet(directory / RUN_FILE, RUN_SCHEMA)
    run = latest_run(runs)
    if run is None:
        return 0, None, None
    return len(runs), run["status"], run["error"]


def is_completed(directory: Path) -> bool:
    """Whether any attempt of the cell completed (then a re-run of the sweep skips it)."""
    return last_status(directory)[1] == "completed"
