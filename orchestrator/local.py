"""Local executor: run the cells of a grid one after another on this machine.

Each cell is its own `python -m workloads.run CONFIG` process, exactly what a Slurm job runs,
so a crash, an OOM or a stuck compile in one cell cannot take the sweep (or the next cell's
measurements, through a warm dynamo cache) with it. Every cell is attempted even when some
fail; the caller turns the outcomes into the exit code.

A distributed cell (several processes) is not for this executor: it starts one process per
cell and is no launcher; Slurm starts a distributed cell's processes, one task each, and each
task runs `run_cell` for its rank (orchestrator/slurm_job.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from workloads.sweep_dir import LOGS_DIR, cell_dir, config_path, missing_repeats, newest_attempt
from workloads.config import distributed_section
from workloads.vocabulary import COMPLETED

if TYPE_CHECKING:  # grid imports Hydra and torch; run_cell in a Slurm task needs neither
    from orchestrator.grid import Cell, Grid

#: An Outcome's status for a cell that an earlier run completed (not run again).
SKIPPED = "skipped"
#: The repository root, so `workloads` imports in the child even without `pip install -e`.
REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Outcome:
    """How one cell ended in this sweep invocation."""

    cell_id: str
    status: str
    """`completed`, `skipped` (completed earlier), or the failure status (failed, oom, not_compiled, ...)."""
    seconds: float = 0.0
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status in (COMPLETED, SKIPPED)


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    # Appended, not prepended: an explicit PYTHONPATH (a test stand-in, a site package) still wins.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(REPO_ROOT)) if p)
    env["PYTHONUNBUFFERED"] = "1"  # logs grow while the cell runs, for `tail -f`
    return env


def _last_line(path: Path, limit: int = 65536) -> str:
    """Last non-empty line of a (possibly large) log file, '' if none."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - limit))
            lines = fh.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    return next((line.strip() for line in reversed(lines) if line.strip()), "")


def why_not_local(grid: Grid) -> str | None:
    """Why the local executor cannot run this grid (cells of several processes), or None."""
    many = [cell.cell_id for cell in grid.cells if distributed_section(cell.config).world_size > 1]
    if not many:
        return None
    return (f"{len(many)} cell(s) train as several processes (distributed.nodes x tasks_per_node > 1, e.g. "
            f"{many[0]}); the local executor runs one process per cell: use a Slurm cluster profile")


def log_paths(logs: Path, rank: int = 0) -> tuple[Path, Path]:
    """stdout and stderr of a cell's process: `stdout.log`/`stderr.log` for rank 0 (every
    single-process cell), `stdout.rank<N>.log`/`stderr.rank<N>.log` for rank N of a distributed cell."""
    suffix = f".rank{rank}" if rank else ""
    return logs / f"stdout{suffix}.log", logs / f"stderr{suffix}.log"


def run_cell(sweep_dir: Path, cell: Cell | str, rank: int = 0, repeat: int = 0) -> Outcome:
    """Run replicate `repeat` of one cell (a Cell or its id) in a subprocess — in a distributed
    cell, this task's rank of it; its stdout/stderr go to the cell's logs/ (see `log_paths`)."""
    cell_id = cell if isinstance(cell, str) else cell.cell_id
    directory = cell_dir(sweep_dir, cell_id)
    logs = directory / LOGS_DIR
    logs.mkdir(parents=True, exist_ok=True)
    attempts_before = newest_attempt(directory)[0]
    command = [sys.executable, "-m", "workloads.run", str(config_path(sweep_dir, cell_id)), "--repeat", str(repeat)]
    stdout_log, stderr_log = log_paths(logs, rank)
    start = time.perf_counter()
    with open(stdout_log, "ab") as out, open(stderr_log, "ab") as err:
        code = subprocess.call(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=_child_env())
    seconds = time.perf_counter() - start
    if code == 0:
        # Rank 0 writes the results, and may not have yet: another rank goes by its exit code.
        if rank > 0 or repeat not in missing_repeats(directory, repeat + 1):
            return Outcome(cell_id, COMPLETED, seconds)
        # Trust the file, not the exit code: a re-run skips only what run.parquet says is done.
        return Outcome(cell_id, "failed", seconds, "exit 0 but run.parquet has no completed attempt")

    # The workload records why in run.parquet (oom, not_compiled, ...) unless it died before;
    # only rank 0 records, so another rank's reason is its own last words.
    attempts, status, error = newest_attempt(directory) if rank == 0 else (attempts_before, None, None)
    wrote_attempt = attempts > attempts_before
    status = status if wrote_attempt and status and status != COMPLETED else "failed"
    if wrote_attempt and isinstance(error, str) and error.strip():
        reason = error.strip().splitlines()[0]  # the workload's own one-line reason
    else:
        reason = _last_line(stderr_log) or "(no output)"  # e.g. the exception of a traceback
    return Outcome(cell_id, status, seconds, f"exit {code}: {reason} [{stderr_log}]")


def run_grid(grid: Grid, out: TextIO = sys.stdout) -> list[Outcome]:
    """Run every replicate of every cell not completed before, in `Grid.replicates` order,
    printing one progress line each."""
    outcomes = []
    todo = grid.replicates()
    for index, (cell, repeat) in enumerate(todo, start=1):
        run = f" run {repeat + 1}/{cell.repeats}" if cell.repeats > 1 else ""
        print(f"[{index}/{len(todo)}] {cell.label}{run} ({cell.cell_id}) ... ", end="", file=out, flush=True)
        if repeat not in missing_repeats(cell_dir(grid.sweep_dir, cell.cell_id), cell.repeats):
            outcome = Outcome(cell.cell_id, SKIPPED)
            print("already completed", file=out, flush=True)
        else:
            outcome = run_cell(grid.sweep_dir, cell, repeat=repeat)
            detail = f": {outcome.message}" if outcome.message else ""
            print(f"{outcome.status} in {outcome.seconds:.1f} s{detail}", file=out, flush=True)
        outcomes.append(outcome)
    return outcomes
