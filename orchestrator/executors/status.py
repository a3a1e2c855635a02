"""`compilebench status SWEEP_DIR`: the state of every cell of a sweep, from its files and its
executor's queue; the cells `--retry-failed` runs again, and following a sweep until it ends
(`sweep --wait`).

A cell's state comes from its result first: the status of the attempt that counts in
`run.parquet` (completed, failed, oom, timeout, cancelled, not_compiled, not_supported). A cell
without a result (or with a failed one whose newer job is in the queue again) takes its state from
the queue: the executor that `manifest.parquet` records for the cell is asked where its job ids are
(`Executor.poll`, orchestrator/executors/base.py, which says what each executor asks). A job that
left no result gives its cell the state it ended in, with the executor's words for why; one the
queue has no record of (GONE) leaves its cell `lost`; a cell without a job id and without a result
is `not run` (a --dry-run, or a local sweep that has not reached it); `unknown` when the queue could
not be asked. An executor's poll never hangs, so neither does `status`.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from orchestrator.executors.base import GONE, UNANSWERED_LIMIT_S, WAIT_INTERVAL_S, ExecutorError, JobState
from workloads.contract.attempts import last_status
from workloads.contract.sweep_dir import (
    STDERR,
    cell_dir,
    cell_dirs,
    is_sweep_dir,
    read_auto_stop,
    read_cell_config,
    read_manifest,
)
from workloads.contract.vocabulary import (
    AUTO_REPEATS,
    COMPLETED,
    LOST,
    NOT_RUN,
    NOT_SUPPORTED,
    PENDING,
    QUEUED,
    RUNNING,
    STATUSES,
    UNKNOWN,
    axes_from_config,
    config_value,
    count_states,
    short_error,
)

#: Cells that `status --retry-failed` runs again: no result that counts and no job in the queue; not
#: a cell whose device cannot run it (`not_supported`: the same partition would refuse it again).
RETRY = (*(state for state in STATUSES[1:] if state != NOT_SUPPORTED), LOST, NOT_RUN)


class NotASweep(ValueError):
    """The directory has neither manifest.parquet nor cells/."""


@dataclass
class CellStatus:
    """One row of the status table."""

    cell_id: str
    axes: dict[str, Any] = field(default_factory=dict)
    """The cell's axes (workloads/contract/vocabulary.py), from the manifest or its config.yaml."""
    job_id: str | None = None
    state: str = NOT_RUN
    attempts: int = 0
    error: str | None = None
    repeats: int | str = 1
    """Replicates the cell runs (config key `repeats`): it is completed when all of them are; with
    repeats=auto, as many as its stop record says (workloads/contract/sweep_dir.py `last_status`)."""
    auto_stop: dict[str, Any] | None = None
    """repeats=auto: the cell's stop record (replicates, reason, speedup), None until it stopped."""


def _from_result(row: CellStatus, directory: Path) -> None:
    row.attempts, status, error = last_status(directory, row.repeats)
    if status is not None:
        row.state, row.error = status, short_error(error) or None


def sweep_status(sweep_dir: Path) -> list[CellStatus]:
    """One CellStatus per cell of the sweep (manifest order, then cells only on disk)."""
    sweep_dir = Path(sweep_dir)
    if not is_sweep_dir(sweep_dir):
        raise NotASweep(f"not a sweep directory: {sweep_dir} (no manifest.parquet, no cells/)")
    rows, executor_of = {}, {}
    manifest = read_manifest(sweep_dir)
    for entry in (
        [] if manifest is None else manifest.astype(object).where(manifest.notna(), None).to_dict("records")
    ):
        job_id = entry.pop("job_id")
        executor_of[entry["cell_id"]] = entry.get("executor")
        axes = {k: v for k, v in entry.items() if k not in ("cell_id", "overrides", "executor")}
        rows[entry["cell_id"]] = CellStatus(
            entry["cell_id"], axes, job_id if isinstance(job_id, str) and job_id else None
        )
    listed = set(rows)
    on_disk = {directory.name for directory in cell_dirs(sweep_dir)}
    for cell_id in sorted(on_disk - listed):
        rows[cell_id] = CellStatus(cell_id)
    for row in rows.values():
        directory = cell_dir(sweep_dir, row.cell_id)
        # One read of each config: the replicates, and the axes of cells the manifest lacks (whose
        # unreadable config is worth a warning; a listed cell has its axes from the manifest).
        config = read_cell_config(directory, STDERR if row.cell_id not in listed else None)
        if row.cell_id not in listed:
            row.axes = axes_from_config(config)
        row.repeats = config_value(config, "repeats") or 1
        row.auto_stop = read_auto_stop(directory) if row.repeats == AUTO_REPEATS else None
        _from_result(row, directory)

    ask = [row for row in rows.values() if row.job_id and row.state != COMPLETED]
    jobs = _poll(sweep_dir, executor_of, ask)
    for row in ask:
        job = _speaking([jobs[job_id] for job_id in row.job_id.split()])
        if row.attempts:  # a result: only a newer job of the cell, queued or running, overrides it
            if job.state in QUEUED:
                row.state = job.state
            continue
        _from_result(row, cell_dir(sweep_dir, row.cell_id))  # the job may have ended since
        if row.attempts:
            continue
        row.state = LOST if job.state == GONE else job.state
        row.error = job.error
    return list(rows.values())


def _poll(
    sweep_dir: Path, executor_of: dict[str, str | None], rows: Sequence[CellStatus]
) -> dict[str, JobState]:
    """Each job id of these cells where its executor (`executor_of` each cell, as the manifest
    records it) says it is: one poll per executor."""
    from orchestrator.executors.choice import executor_named  # the executors: only where a job is asked

    asked: dict[str | None, list[str]] = {}
    for row in rows:
        asked.setdefault(executor_of.get(row.cell_id), []).extend(row.job_id.split())
    jobs = {}
    for name, job_ids in asked.items():
        try:
            jobs.update(executor_named(str(name)).poll(sweep_dir, list(dict.fromkeys(job_ids))))
        except ExecutorError as exc:
            jobs.update(dict.fromkeys(job_ids, JobState(UNKNOWN, str(exc))))
    return jobs


def _speaking(jobs: Sequence[JobState]) -> JobState:
    """The job that speaks for a cell's jobs (one per replicate, oldest first): a running one, else a
    pending one, else the last one the queue knows, else the last one."""
    by_state = {job.state: job for job in jobs}
    known = [job for job in jobs if job.state != GONE]
    return by_state.get(RUNNING) or by_state.get(PENDING) or (known or jobs)[-1]


def to_json(sweep_dir: Path, rows: Sequence[CellStatus]) -> str:
    """`status --json`: the sweep, its cells counted by state, and per cell its id, axes, state,
    attempts, replicates (`auto`, with its stop record once it stopped), job ids (one per replicate
    submitted, newest last) and error."""
    cells = [
        {
            "cell_id": row.cell_id,
            "axes": row.axes,
            "state": row.state,
            "attempts": row.attempts,
            "repeats": row.repeats,
            "auto_stop": row.auto_stop,
            "job_ids": row.job_id.split() if row.job_id else [],
            "error": row.error,
        }
        for row in rows
    ]
    document = {
        "sweep_dir": str(Path(sweep_dir).resolve()),
        "cells": cells,
        "counts": dict(Counter(row.state for row in rows)),
        "all_completed": all_completed(rows),
    }
    # Axis values read from Parquet may be numpy scalars: `.item()` makes them plain numbers.
    return json.dumps(
        document, indent=2, default=lambda value: value.item() if hasattr(value, "item") else str(value)
    )


def all_completed(rows: Sequence[CellStatus]) -> bool:
    """Whether there are cells and every one of them completed."""
    return bool(rows) and all(row.state == COMPLETED for row in rows)


def to_retry(rows: Sequence[CellStatus]) -> list[CellStatus]:
    """The cells that did not complete and have no job in the queue (states in RETRY)."""
    return [row for row in rows if row.state in RETRY]


def _elapsed(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def follow(
    sweep_dir: Path,
    out: TextIO | None = None,
    interval_s: float = WAIT_INTERVAL_S,
    give_up_s: float = UNANSWERED_LIMIT_S,
) -> list[CellStatus]:
    """Look at the sweep every `interval_s` seconds until no cell is pending or running, showing
    the cells per state (`[12s] 3 completed, 1 running`): rewritten in place on a terminal, one
    line per look otherwise (a log file). Returns the last look's rows.

    A queue that stops answering turns queued cells `unknown`; they are waited for, but for at
    most `give_up_s` in a row, so that --wait cannot hang on a broken scheduler: the rows returned
    then hold `unknown` cells.
    """
    out = sys.stdout if out is None else out  # looked up per call: tests and callers redirect it
    tty = out.isatty()
    start = time.monotonic()
    unanswered_since: float | None = None
    while True:
        rows = sweep_status(sweep_dir)
        now = time.monotonic()
        line = f"[{_elapsed(now - start)}] {count_states(row.state for row in rows)}"
        print(f"\r{line}\x1b[K" if tty else line, end="" if tty else "\n", file=out, flush=True)
        states = {row.state for row in rows}
        if UNKNOWN not in states:
            unanswered_since = None
        elif unanswered_since is None:
            unanswered_since = now
        given_up = unanswered_since is not None and now - unanswered_since > give_up_s
        if given_up or not states & {*QUEUED, UNKNOWN}:
            break
        time.sleep(interval_s)
    if tty:
        print(file=out)  # end the line rewritten in place
    return rows
