"""The sweep directory: where each file lies, and reading and writing its manifest and results.

    SWEEP_DIR/
      manifest.parquet              one row per cell (MANIFEST_SCHEMA): axes, overrides, executor, job id
      cells/<cell_id>/config.yaml   the cell's fully resolved config
      cells/<cell_id>/run.parquet   one row per attempt (RUN_SCHEMA)
      cells/<cell_id>/steps.parquet one row per step of every attempt (STEPS_SCHEMA)
      cells/<cell_id>/logs/         stdout/stderr of the cell's processes, links to Slurm's logs
      cells/<cell_id>/auto_repeats.json  repeats=auto: how many replicates the cell ran, and what stopped it
      tasks/<job id>                a packed Slurm task's place that has the device (cluster.cells_per_task)
      sbatch/  submitit/  smoke/  report/  compile_cache/

Every package goes through this module: the orchestrator lays a grid out, the workload writes a
cell's files, analysis reads everything; which of a cell's attempts counts, and whether it is done,
is read from its run.parquet by workloads/contract/attempts.py. The columns are in
workloads/contract/schema.py. Every Parquet file is read through `read_files`, which lifts what an older
version wrote to the current schema (workloads/contract/upgrade.py). Readers tolerate what a shared
filesystem shows mid-sweep: a missing file is None, an unreadable one is reported.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import yaml

from workloads.contract.file_lock import exclusive
from workloads.contract.schema import (
    MANIFEST_SCHEMA,
    RUN_SCHEMA,
    atomic_output,
    table_from_rows,
    write_parquet_atomic,
)
from workloads.contract.upgrade import LIFT_INPUTS, lift, lift_config

MANIFEST_FILE = "manifest.parquet"
MANIFEST_LOCK = ".manifest.lock"
CELLS_DIR = "cells"
CONFIG_FILE = "config.yaml"
RUN_FILE = "run.parquet"
STEPS_FILE = "steps.parquet"
LOGS_DIR = "logs"
AUTO_STOP_FILE = "auto_repeats.json"  # repeats=auto: {"replicates": n, "reason": ..., "speedup": ...}
SBATCH_DIR = "sbatch"  # the scripts submitted (<job>.sh) and those of a dry run (dryrun-NN.sh)
SUBMITIT_DIR = "submitit"  # submitit's pickles and job logs
SMOKE_DIR = "smoke"  # the sweep of `sweep --smoke`
REPORT_DIR = "report"  # `analyze`'s tables, figures and index page
COMPILE_CACHE_DIR = "compile_cache"  # cluster.compile_cache=shared
TASKS_DIR = "tasks"  # packed Slurm tasks: the place of each that has the device
ENVIRONMENTS_DIR = "environments"  # <name>.sh: the launcher of each named environment a cell runs in
#: What a sweep directory may hold at its top level; anything else means it is somebody else's.
SWEEP_ENTRIES = frozenset(
    {
        MANIFEST_FILE,
        CELLS_DIR,
        SBATCH_DIR,
        SUBMITIT_DIR,
        SMOKE_DIR,
        REPORT_DIR,
        COMPILE_CACHE_DIR,
        TASKS_DIR,
        ENVIRONMENTS_DIR,
    }
)

#: libyaml's emitter and parser where PyYAML was built with them (the same YAML, ~20x faster
#: than the pure-Python ones, which dominated a 10,000-cell dry-run).
_YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class SweepDirError(ValueError):
    """A directory that is not (or cannot become) a sweep directory; the message is one line."""


class _Stderr:
    """sys.stderr as it is when written to (a default argument would keep the one of import time,
    which a test's capture or a redirection may have replaced since)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)


#: Where readers' warnings go unless told otherwise (`warn=None`: nowhere).
STDERR: TextIO = _Stderr()  # type: ignore[assignment]


def check_sweep_dir(sweep_dir: Path) -> None:
    """SweepDirError unless `sweep_dir` is new, empty, or a sweep directory (a sweep writes
    cells/, a manifest and scripts into it, and never into a home or data directory by mistake)."""
    path = Path(sweep_dir)
    if not path.exists():
        return
    if not path.is_dir():
        raise SweepDirError(f"hydra.sweep.dir={path} is a file, not a directory")
    # Hidden names are left alone: ours are temporary files of atomic writes (.manifest.parquet.*.tmp).
    foreign = sorted(
        e.name for e in path.iterdir() if e.name not in SWEEP_ENTRIES and not e.name.startswith(".")
    )
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise SweepDirError(
            f"hydra.sweep.dir={path} is not a compilebench sweep directory (it holds {shown}); "
            "choose a new or empty directory"
        )


def is_sweep_dir(sweep_dir: Path) -> bool:
    """Whether the directory has a manifest or cells (what `status` and `analyze` need)."""
    return (Path(sweep_dir) / MANIFEST_FILE).is_file() or (Path(sweep_dir) / CELLS_DIR).is_dir()


def cell_dir(sweep_dir: Path, cell_id: str) -> Path:
    return Path(sweep_dir) / CELLS_DIR / cell_id


def config_path(sweep_dir: Path, cell_id: str) -> Path:
    return cell_dir(sweep_dir, cell_id) / CONFIG_FILE


def environment_launcher(sweep_dir: Path, environment: str) -> Path:
    """The script that runs a Python of the named environment (`bash LAUNCHER -m workloads.run ...`)."""
    return Path(sweep_dir) / ENVIRONMENTS_DIR / f"{environment}.sh"


def cell_dirs(sweep_dir: Path) -> list[Path]:
    """The cell directories of a sweep, sorted by name (= cell id)."""
    root = Path(sweep_dir) / CELLS_DIR
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir())


# Reading Parquet files.


def _scan(paths: Sequence[Path], schema: pa.Schema) -> tuple[pa.Table, list[tuple[Path, Exception]]]:
    """The files as one table of `schema` (columns a file lacks come back null), and the files that
    could not be read, with their error. One `pyarrow.dataset` scan reads them all; one bad file fails
    a scan, so then they are read one by one."""
    if not paths:
        return schema.empty_table(), []

    def scan(files: Sequence[Path]) -> pa.Table:
        return ds.dataset([str(p) for p in files], schema=schema, format="parquet").to_table()

    try:
        return scan(paths), []
    except Exception:  # pyarrow raises several types for truncated or garbage files
        pass
    tables, bad = [], []
    for path in paths:
        try:
            tables.append(scan([path]))
        except Exception as exc:
            bad.append((Path(path), exc))
    return (pa.concat_tables(tables) if tables else schema.empty_table()), bad


def read_files(
    paths: Sequence[Path], kind: pa.Schema, columns: Sequence[str] | None = None
) -> tuple[pa.Table, list[tuple[Path, Exception]]]:
    """Files of one kind (RUN_SCHEMA, STEPS_SCHEMA or MANIFEST_SCHEMA) as one table of its current
    columns (only `columns` where given: the others are not decoded), whatever schema version wrote
    them (`upgrade.lift`), and the files that could not be read, with their error."""
    wanted = list(columns) if columns is not None else kind.names
    inputs = LIFT_INPUTS if kind is RUN_SCHEMA else ()
    table, bad = _scan(paths, pa.schema([kind.field(name) for name in dict.fromkeys([*wanted, *inputs])]))
    return lift(table, kind).select(wanted), bad


def read_parquet(path: Path, kind: pa.Schema, warn: TextIO | None = STDERR) -> pd.DataFrame | None:
    """The file as a DataFrame of `kind`'s columns (`read_files`); None if it is missing (silently: the
    caller knows whether absence is expected) or unreadable (with a line on `warn`)."""
    if not Path(path).exists():
        return None
    table, bad = read_files([path], kind)
    for bad_path, exc in bad:
        if warn is not None:
            print(f"warning: cannot read {bad_path}: {exc}", file=warn)
        return None
    return table.to_pandas()


# The cell's config.


def config_yaml(config: Mapping[str, Any]) -> str:
    """A cell's resolved config as the YAML text of its config.yaml."""
    return yaml.dump(dict(config), Dumper=_YAML_DUMPER, sort_keys=False)


def write_cell_config(sweep_dir: Path, cell_id: str, config: Mapping[str, Any]) -> Path:
    """Write a cell's resolved config (rewritten each time: the cluster part may change)."""
    path = config_path(sweep_dir, cell_id)
    with atomic_output(path) as fh:
        fh.write(config_yaml(config).encode())
    return path


def read_cell_config(directory: Path, warn: TextIO | None = STDERR) -> dict[str, Any]:
    """The config.yaml of a cell directory as a dict ({} if absent or unreadable), in the current keys
    (`upgrade.lift_config`)."""
    path = Path(directory) / CONFIG_FILE
    if not path.exists():
        return {}
    try:
        values = yaml.load(path.read_text(), Loader=_YAML_LOADER)
    except (OSError, yaml.YAMLError) as exc:
        if warn is not None:
            print(f"warning: cannot read {path}: {exc}", file=warn)
        return {}
    return lift_config(values) if isinstance(values, dict) else {}


# The manifest.


@contextlib.contextmanager
def manifest_lock(sweep_dir: Path) -> Iterator[None]:
    """Hold the sweep directory's manifest lock (flock on SWEEP_DIR/.manifest.lock, or where the
    filesystem refuses flock the lock file .manifest.lock.held: workloads/contract/file_lock.py) for a
    read-merge-write of the manifest: two sweeps of one directory at once keep each other's rows."""
    with exclusive(Path(sweep_dir) / MANIFEST_LOCK):
        yield


def read_manifest(sweep_dir: Path, warn: TextIO | None = STDERR) -> pd.DataFrame | None:
    """manifest.parquet (MANIFEST_SCHEMA's columns), or None when there is none or it is unreadable."""
    return read_parquet(Path(sweep_dir) / MANIFEST_FILE, MANIFEST_SCHEMA, warn)


def write_manifest(sweep_dir: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """Write these rows (in order) into SWEEP_DIR/manifest.parquet; the rows of other cells already
    there (an earlier sweep of another grid into this directory, or one running now) are kept
    after them."""
    path = Path(sweep_dir) / MANIFEST_FILE
    rows = [dict(row) for row in rows]
    ours = {row["cell_id"] for row in rows}
    with manifest_lock(sweep_dir):
        old = read_manifest(sweep_dir)
        if old is not None:
            old = old.astype(object).where(old.notna(), None)  # pandas' NaN back to null
            rows += [row for row in old.to_dict("records") if row["cell_id"] not in ours]
        write_parquet_atomic(table_from_rows(rows, MANIFEST_SCHEMA), path)
    return path


def recorded_job_ids(sweep_dir: Path) -> dict[str, str]:
    """{cell_id: job_id} of an existing manifest (cells never submitted left out); {} if none."""
    manifest = read_manifest(sweep_dir)
    if manifest is None:
        return {}
    return {
        cell: job
        for cell, job in zip(manifest["cell_id"], manifest["job_id"])
        if isinstance(job, str) and job
    }


# Packed Slurm tasks (orchestrator/executors/slurm/packing.py): which of its places a running task is at.


def write_task_place(sweep_dir: Path, task_job_id: str, place: int) -> None:
    """Record that the task's replicate at `place` has the device now (-1: none yet)."""
    with atomic_output(Path(sweep_dir) / TASKS_DIR / task_job_id) as fh:
        fh.write(str(place).encode())


def read_task_place(sweep_dir: Path, task_job_id: str) -> int | None:
    """The place `write_task_place` recorded last for the task; None for none (or none yet)."""
    try:
        place = int((Path(sweep_dir) / TASKS_DIR / task_job_id).read_text())
    except (OSError, ValueError):
        return None
    return place if place >= 0 else None


# repeats=auto: a cell's stop record.


def write_auto_stop(directory: Path, record: Mapping[str, Any]) -> None:
    """Write a repeats=auto cell's stop record: `replicates` (how many it ran), `reason` (what stopped
    it), the speedup with its interval (`speedup`, `low`, `high`; null where it has none), the
    margin it was decided with (`equivalence`, the config key) and, where they were, its eager cell's
    runs its speedup rested on (`against`) and its run apart (`apart`)."""
    with atomic_output(Path(directory) / AUTO_STOP_FILE) as fh:
        fh.write(json.dumps(dict(record)).encode())


def read_auto_stop(directory: Path) -> dict[str, Any] | None:
    """A repeats=auto cell's stop record (`write_auto_stop`); None while it has none (it has not
    stopped) or where it is unreadable."""
    try:
        record = json.loads((Path(directory) / AUTO_STOP_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("replicates"), int) else None
