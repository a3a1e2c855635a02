"""A grid laid out in its sweep directory (each cell's resolved config and the manifest), and read back.

Where the files lie and how they are read and written is workloads/contract/sweep_dir.py; this module
knows only what a Grid (orchestrator/grid/cells.py) adds: the cells' overrides and the executor.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from orchestrator.grid.cells import Cell, Grid
from orchestrator.grid.environments import write_launchers
from workloads.contract.attempts import missing_repeats
from workloads.contract.sweep_dir import (
    SweepDirError,
    cell_dir,
    cell_dirs,
    config_path,
    read_auto_stop,
    read_cell_config,
    read_manifest,
    recorded_job_ids,
    write_cell_config,
    write_manifest,
)


def manifest_rows(grid: Grid, job_ids: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The grid's manifest rows, in grid order: each cell's axes, overrides, executor and job id."""
    job_ids = job_ids or {}
    return [
        {
            "cell_id": cell.cell_id,
            **cell.axes,
            "overrides": " ".join(cell.overrides),
            "executor": grid.executor,
            "job_id": job_ids.get(cell.cell_id),
        }
        for cell in grid.cells
    ]


def record_grid(grid: Grid, job_ids: dict[str, str] | None = None) -> Path:
    """Write the grid's rows into the manifest (other cells' rows already there are kept)."""
    return write_manifest(grid.sweep_dir, manifest_rows(grid, job_ids))


def prepare(grid: Grid) -> dict[str, str]:
    """Write every cell's config.yaml, the manifest and the launcher of each named environment
    (orchestrator/grid/environments.py); runs nothing. A scheduler's job ids
    recorded by an earlier run of the sweep are kept (and returned): they are the last job
    of each cell until a new one is submitted."""
    job_ids = recorded_job_ids(grid.sweep_dir) if grid.executor != "local" else {}
    for cell in grid.cells:
        write_cell_config(grid.sweep_dir, cell.cell_id, cell.config)
    write_launchers(grid.sweep_dir, grid.cluster, environment_names(grid))
    record_grid(grid, job_ids)
    return job_ids


def environment_names(grid: Grid) -> set[str]:
    """The named environments the grid's cells run in."""
    return {cell.config["environment"] for cell in grid.cells if cell.config.get("environment")}


def read_grid(sweep_dir: Path) -> Grid:
    """The grid that `prepare` laid out, read back from the files: the manifest's cells (then
    cells found only on disk), each with its config.yaml and the overrides the manifest
    recorded, and the cluster of those configs. Reading, not expanding the overrides again,
    keeps the cells what they were even if conf/ changed since. Raises SweepDirError."""
    sweep_dir = Path(os.path.abspath(sweep_dir))  # as expand() gives it: sbatch scripts name it
    manifest = read_manifest(sweep_dir)
    recorded = {} if manifest is None else dict(zip(manifest["cell_id"], manifest["overrides"]))
    cell_ids = list(recorded) + [d.name for d in cell_dirs(sweep_dir) if d.name not in recorded]
    cells, clusters = [], {}
    for cell_id in cell_ids:
        config = read_cell_config(cell_dir(sweep_dir, cell_id), warn=None)
        text = recorded.get(cell_id)
        # The manifest joins the overrides with spaces; splitting on single spaces gives the same text back.
        cell = Cell(cell_id, tuple(text.split(" ")) if isinstance(text, str) and text else (), config)
        if not all(cell.axes.get(name) for name in ("model", "backend", "precision")):
            raise SweepDirError(f"cell {cell_id}: no usable config in {config_path(sweep_dir, cell_id)}")
        cells.append(cell)
        clusters.setdefault(json.dumps(config.get("cluster"), sort_keys=True), cell_id)
    if len(clusters) > 1:
        first, other = list(clusters.values())[:2]
        raise SweepDirError(
            f"cells {first} and {other} of {sweep_dir} have different cluster settings; "
            "run `compilebench sweep` with the sweep's overrides instead"
        )
    cluster = json.loads(next(iter(clusters))) if clusters else None
    return Grid(cells=cells, sweep_dir=sweep_dir, cluster=cluster or {})


def stopped(sweep_dir: Path, cell: Cell) -> dict[str, Any] | None:
    """A repeats=auto cell's stop record where it has one and every replicate it names completed: the
    cell runs no more (orchestrator/sweep/rounds.py)."""
    directory = cell_dir(sweep_dir, cell.cell_id)
    record = read_auto_stop(directory)
    return record if record and not missing_repeats(directory, record["replicates"]) else None
