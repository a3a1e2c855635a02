"""A cell's attempts, from its run.parquet: which attempt speaks for the cell or a replicate, which
replicates are done, how the last run ended, the next attempt's number, and the row of an attempt
whose process was killed before it could write one. The files and their columns are
workloads/contract/sweep_dir.py's and schema.py's."""

from __future__ import annotations

import os
import socket
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from workloads.contract.schema import RUN_SCHEMA, SCHEMA_VERSION, append_rows_atomic
from workloads.contract.sweep_dir import RUN_FILE, read_auto_stop, read_cell_config, read_parquet
from workloads.contract.vocabulary import AUTO_REPEATS, COMPLETED, axes_from_config


def counting_attempts(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per cell_id: the attempt that speaks for the cell, i.e. the last completed one,
    else the last one."""
    ranked = runs.assign(_completed=runs["status"] == COMPLETED)
    ranked = ranked.sort_values(["cell_id", "_completed", "attempt"], kind="stable")
    return ranked.drop_duplicates("cell_id", keep="last").drop(columns="_completed")


def replicate_attempts(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (cell_id, repeat) of run rows: the attempt that speaks for each
    replicate of a cell (as `counting_attempts` for a cell)."""
    ranked = runs.assign(_completed=runs["status"] == COMPLETED)
    ranked = ranked.sort_values(["cell_id", "repeat", "_completed", "attempt"], kind="stable")
    return ranked.drop_duplicates(["cell_id", "repeat"], keep="last").drop(columns="_completed")


def _runs(directory: Path) -> pd.DataFrame:
    """A cell directory's run rows (none where there is no readable run.parquet)."""
    runs = read_parquet(Path(directory) / RUN_FILE, RUN_SCHEMA)
    return runs if runs is not None else RUN_SCHEMA.empty_table().to_pandas()


def _missing(runs: pd.DataFrame, repeats: int) -> list[int]:
    done = set(runs.loc[runs["status"] == COMPLETED, "repeat"])
    return [repeat for repeat in range(repeats) if repeat not in done]


def _newest(runs: pd.DataFrame) -> tuple[str | None, str | None]:
    """(status, error) of the newest of these attempts; (None, None) for none."""
    if runs.empty:
        return None, None
    run = runs.sort_values("attempt").iloc[-1]
    return run["status"], run["error"]


def newest_attempt(directory: Path) -> tuple[int, str | None, str | None]:
    """(attempts recorded, status of the newest attempt, its error): how the last run ended."""
    runs = _runs(directory)
    return (len(runs), *_newest(runs))


def missing_repeats(directory: Path, repeats: int = 1) -> list[int]:
    """The replicates (0..repeats-1) of a cell that no attempt has completed yet. A cell with no
    run.parquet reads no file: a 10,000-cell dry run plans 10,000 of them (5 s against 29 s)."""
    if not (Path(directory) / RUN_FILE).exists():
        return list(range(repeats))
    return _missing(_runs(directory), repeats)


def last_status(directory: Path, repeats: int | str = 1) -> tuple[int, str | None, str | None]:
    """(attempts recorded, the cell's status, its error) from run.parquet: `completed` once every
    replicate has completed, else the status of the latest attempt of a replicate that has not
    (None when such a replicate never ran: the cell is unfinished). With repeats=auto the replicates
    are as many as the cell's stop record says; without one, the cell is unfinished: one more."""
    runs = _runs(directory)
    if runs.empty:
        return 0, None, None
    if repeats == AUTO_REPEATS:
        stop = read_auto_stop(directory)
        repeats = stop["replicates"] if stop else int(runs["repeat"].max()) + 2
    missing = _missing(runs, int(repeats))
    if not missing:
        return len(runs), COMPLETED, None
    return (len(runs), *_newest(runs[runs["repeat"].isin(missing)]))


def next_attempt(directory: Path) -> int:
    """The attempt number for a new run in a cell directory: one more than the last recorded."""
    path = Path(directory) / RUN_FILE
    if not path.exists():
        return 1
    attempts = pq.read_table(path, columns=["attempt"]).column("attempt").to_pylist()
    return max(attempts, default=0) + 1


def record_killed_attempt(
    directory: Path, cell_id: str, repeat: int, status: str, error: str, started_at: datetime
) -> None:
    """A run row for an attempt whose process ended before it could write one (the kernel's OOM
    killer sends SIGKILL, which no process can catch; a named environment whose Python cannot
    import the workload): written by the process that started it, so that the attempt is a recorded status,
    not a cell without a result."""
    directory = Path(directory)
    row = {
        **axes_from_config(read_cell_config(directory, None)),
        "cell_id": cell_id,
        "attempt": next_attempt(directory),
        "repeat": repeat,
        "status": status,
        "error": error,
        "hostname": socket.gethostname(),
        "started_at": started_at,
        "finished_at": datetime.now(timezone.utc),
        "slurm_job_id": os.environ.get("SLURM_ARRAY_JOB_ID") or os.environ.get("SLURM_JOB_ID"),
        "slurm_array_task_id": os.environ.get("SLURM_ARRAY_TASK_ID"),
        "partition": os.environ.get("SLURM_JOB_PARTITION"),
        "schema_version": SCHEMA_VERSION,
    }
    append_rows_atomic(directory / RUN_FILE, [row], RUN_SCHEMA)
