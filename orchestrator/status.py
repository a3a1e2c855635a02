"""`compilebench status SWEEP_DIR`: the state of every cell of a sweep, from its files and Slurm;
the cells `--retry-failed` runs again, and following a sweep until it ends (`sweep --wait`).

A cell's state comes from its result first: the status of the attempt that counts in
`run.parquet` (completed, failed, oom, timeout, cancelled, not_compiled). A cell without a
result (or with a failed one whose newer job is in the queue again) takes its state from the
scheduler, for the job id that `manifest.parquet` records: `squeue` for the jobs the controller
still knows (pending, running, and those that ended a few minutes ago), then `sacct` for the
others where accounting exists. A job that neither knows and that left no result is `lost`
(e.g. a node died, or the controller forgot it; also an array task cancelled while it still
pended together with other tasks of its array: Slurm 22.05 keeps no record of it, in squeue or
sacct); a cell without a job id and without a result is `not run` (a --dry-run, or a local
sweep that has not reached it); `unknown` when the scheduler could not be asked. Every
scheduler call has a short timeout, and a `sacct` that is missing or reports accounting storage
disabled is simply not used: `status` never hangs.
"""

from __future__ import annotations

import getpass
import re
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence, TextIO

from analysis.collect import CELLS_DIR, axes_from_config, cell_dirs, read_cell_config, read_parquet
from orchestrator.sweep_dir import MANIFEST_FILE, MANIFEST_SCHEMA, cell_dir, last_status

#: Seconds a scheduler query may take; a query that takes longer is treated as unanswered.
QUERY_TIMEOUT_S = 10
#: Seconds between two looks at a sweep that `sweep --wait` follows.
WAIT_INTERVAL_S = 5.0
#: How long `--wait` goes on following while squeue does not answer (cells `unknown`).
UNANSWERED_LIMIT_S = 120.0
#: Longest error shown in the table (its first line only).
ERROR_WIDTH = 60
COLUMNS = ("cell_id", "model", "size", "backend", "precision", "job_id", "state", "attempts", "error")

#: Slurm job states (squeue %T, sacct State) -> cell state.
SLURM_STATES = {
    "PENDING": "pending", "REQUEUED": "pending", "REQUEUE_FED": "pending", "REQUEUE_HOLD": "pending",
    "CONFIGURING": "pending", "RESV_DEL_HOLD": "pending",
    "RUNNING": "running", "COMPLETING": "running", "STAGE_OUT": "running", "SIGNALING": "running",
    "SUSPENDED": "running", "STOPPED": "running", "RESIZING": "running",
    "TIMEOUT": "timeout", "DEADLINE": "timeout", "CANCELLED": "cancelled", "OUT_OF_MEMORY": "oom",
    "FAILED": "failed", "NODE_FAIL": "failed", "BOOT_FAIL": "failed", "PREEMPTED": "failed",
    "SPECIAL_EXIT": "failed", "REVOKED": "failed",
    "COMPLETED": "lost",  # the job ended well but the cell wrote no result
}
ACTIVE = ("pending", "running")
#: Cells that `status --retry-failed` runs again: no result that counts and no job in the queue.
RETRY = ("failed", "oom", "timeout", "cancelled", "not_compiled", "lost", "not run")
#: Order of the states in the count line; states not listed come after, by name.
ORDER = ("completed", "running", "pending", "failed", "oom", "timeout", "cancelled", "not_compiled", "lost",
         "unknown", "not run")


class NotASweep(ValueError):
    """The directory has neither manifest.parquet nor cells/."""


@dataclass
class CellStatus:
    """One row of the status table."""

    cell_id: str
    model: str | None = None
    size: str | None = None
    backend: str | None = None
    precision: str | None = None
    job_id: str | None = None
    state: str = "not run"
    attempts: int = 0
    error: str | None = None


def short_error(error: Any, width: int = ERROR_WIDTH) -> str | None:
    """The first non-empty line of an error, cut to `width` characters (None for no error)."""
    if not isinstance(error, str):
        return None
    line = next((line.strip() for line in error.splitlines() if line.strip()), "")
    return line if len(line) <= width else line[: width - 1] + "…"


def _run(*command: str) -> str | None:
    """stdout of a scheduler query, or None when it is missing, fails or takes too long."""
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def expand_job_ids(job_id: str) -> list[str]:
    """Array records as sacct prints them for tasks not started yet: `12_[0-3,5%2]` ->
    `12_0 ... 12_3, 12_5`; any other id as it is."""
    match = re.fullmatch(r"(\d+)_\[([^\]]*)\]", job_id)
    if not match:
        return [job_id]
    base, ranges = match.group(1), match.group(2).split("%")[0]
    ids = []
    try:
        for part in filter(None, ranges.split(",")):
            first, _, last = part.partition("-")
            ids += [f"{base}_{i}" for i in range(int(first), int(last or first) + 1)]
    except ValueError:  # a form this parser does not know (a step): keep the record as it is
        return [job_id]
    return ids


def parse_states(text: str) -> dict[str, str]:
    """`JOBID|STATE` lines (squeue -o '%i|%T', sacct -P -o JobID,State) -> {job id: Slurm state};
    `CANCELLED by 0` counts as CANCELLED, and a later line of a job (a requeue) wins.

    A task's own line wins over a line for a range of tasks: sacct keeps the range of an array's
    pending record as it was at submission, so after tasks 0 and 1 started and task 2 was
    cancelled it prints `12_0|COMPLETED`, `12_1|FAILED` and `12_[0-2]|CANCELLED`."""
    own: dict[str, str] = {}
    ranged: dict[str, str] = {}
    for line in text.splitlines():
        job_id, _, state = line.strip().partition("|")
        if job_id and state:
            ids = expand_job_ids(job_id)
            for one in ids:
                (own if ids == [job_id] else ranged)[one] = state.split()[0].rstrip("+")
    return {**ranged, **own}


def scheduler_states(job_ids: Sequence[str]) -> dict[str, str] | None:
    """Slurm state of each of these jobs that squeue or sacct knows; None when squeue cannot
    be asked at all (then nothing can be said about the jobs)."""
    if not job_ids:
        return {}
    queue = _run("squeue", "-h", "-r", "-t", "all", "-u", getpass.getuser(), "-o", "%i|%T")
    states = parse_states(queue) if queue is not None else {}
    missing = [job_id for job_id in job_ids if job_id not in states]
    if missing:  # the controller has forgotten them: accounting, where it exists, remembers
        arrays = sorted({job_id.split("_")[0] for job_id in missing})
        accounting = _run("sacct", "-X", "-n", "-P", "-j", ",".join(arrays), "-o", "JobID,State")
        if accounting is not None:
            states.update({k: v for k, v in parse_states(accounting).items() if k not in states})
        elif queue is None:
            return None
    return states


def _manifest_rows(sweep_dir: Path) -> list[dict[str, Any]]:
    manifest = read_parquet(sweep_dir / MANIFEST_FILE, MANIFEST_SCHEMA)
    return [] if manifest is None else manifest.to_dict("records")


def _axes_from_config(directory: Path) -> dict[str, Any]:
    """Axes of a cell that the manifest lacks, from its config.yaml."""
    axes = axes_from_config(read_cell_config(directory))
    return {key: axes[key] for key in ("model", "size", "backend", "precision")}


def _from_result(row: CellStatus, directory: Path) -> None:
    row.attempts, status, error = last_status(directory)
    if status is not None:
        row.state, row.error = status, short_error(error)


def sweep_status(sweep_dir: Path) -> list[CellStatus]:
    """One CellStatus per cell of the sweep (manifest order, then cells only on disk)."""
    sweep_dir = Path(sweep_dir)
    if not (sweep_dir / MANIFEST_FILE).is_file() and not (sweep_dir / CELLS_DIR).is_dir():
        raise NotASweep(f"not a sweep directory: {sweep_dir} (no {MANIFEST_FILE}, no {CELLS_DIR}/)")
    rows = {}
    for entry in _manifest_rows(sweep_dir):
        job_id = entry.get("job_id")
        rows[entry["cell_id"]] = CellStatus(entry["cell_id"], entry.get("model"), entry.get("size"),
                                            entry.get("backend"), entry.get("precision"),
                                            job_id if isinstance(job_id, str) and job_id else None)
    for directory in cell_dirs(sweep_dir):
        if directory.name not in rows:
            rows[directory.name] = CellStatus(directory.name, **_axes_from_config(directory))
    for row in rows.values():
        _from_result(row, cell_dir(sweep_dir, row.cell_id))

    ask = [row for row in rows.values() if row.job_id and row.state != "completed"]
    states = scheduler_states([row.job_id for row in ask])
    for row in ask:
        slurm = None if states is None else states.get(row.job_id)
        state = SLURM_STATES.get(slurm, slurm.lower()) if slurm else None
        if row.attempts:  # a result: only a newer job of the cell, queued or running, overrides it
            if state in ACTIVE:
                row.state = state
            continue
        _from_result(row, cell_dir(sweep_dir, row.cell_id))  # the job may have ended since
        if row.attempts:
            continue
        if states is None:
            row.state, row.error = "unknown", "squeue did not answer"
        elif state is None:
            row.state, row.error = "lost", "job unknown to squeue/sacct, no result"
        else:
            row.state = state
            if state not in ACTIVE:
                row.error = f"job {slurm}, no result (see logs/)"
    return list(rows.values())


def count_states(rows: Sequence[CellStatus]) -> str:
    """The cells counted by state, e.g. `3 completed, 1 running, 4 pending` ('none' for no cells)."""
    counts = Counter(row.state for row in rows)
    rank = lambda state: (ORDER.index(state) if state in ORDER else len(ORDER), state)  # noqa: E731
    return ", ".join(f"{counts[state]} {state}" for state in sorted(counts, key=rank)) or "none"


def render(rows: Sequence[CellStatus]) -> str:
    """The status table (Markdown) and a last line counting the cells by state."""
    from analysis.tables import render_markdown

    table = render_markdown([asdict(row) for row in rows], COLUMNS)
    return f"{table}\n\n{len(rows)} cell(s): {count_states(rows)}"


def all_completed(rows: Sequence[CellStatus]) -> bool:
    """Whether there are cells and every one of them completed."""
    return bool(rows) and all(row.state == "completed" for row in rows)


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


def follow(sweep_dir: Path, out: TextIO = sys.stdout, interval_s: float = WAIT_INTERVAL_S) -> list[CellStatus]:
    """Look at the sweep every `interval_s` seconds until no cell is pending or running, showing
    the cells per state (`[12s] 3 completed, 1 running`): rewritten in place on a terminal, one
    line per look otherwise (a log file). Returns the last look's rows.

    A squeue that stops answering turns queued cells `unknown`; they are waited for, but for at
    most UNANSWERED_LIMIT_S in a row, so that --wait cannot hang on a broken scheduler.
    """
    tty = out.isatty()
    start = time.monotonic()
    unanswered_since: float | None = None
    while True:
        rows = sweep_status(sweep_dir)
        now = time.monotonic()
        line = f"[{_elapsed(now - start)}] {count_states(rows)}"
        print(f"\r{line}\x1b[K" if tty else line, end="" if tty else "\n", file=out, flush=True)
        states = {row.state for row in rows}
        if "unknown" not in states:
            unanswered_since = None
        elif unanswered_since is None:
            unanswered_since = now
        given_up = unanswered_since is not None and now - unanswered_since > UNANSWERED_LIMIT_S
        if given_up or not states & {*ACTIVE, "unknown"}:
            break
        time.sleep(interval_s)
    if tty:
        print(file=out)  # end the line rewritten in place
    if given_up:
        print(f"squeue has not answered for {UNANSWERED_LIMIT_S:.0f} s: stopped waiting", file=out, flush=True)
    return rows
