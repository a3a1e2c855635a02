"""The cell-process runner that both executors use: one replicate (or rank) of a cell as its own
`python -m workloads.run CONFIG` process, its output in the cell's logs/, and how it ended.

The process is this Python's, or, for a cell of a named environment (`environment=NAME`), the
environment's: `bash SWEEP_DIR/environments/NAME.sh -m workloads.run ...`
(orchestrator/grid/environments.py). The workload records its own status (workloads/run.py);
`CellProcess.finish` is the one place that turns a process's end into the attempt's outcome: it
trusts run.parquet over the exit code, and records a `failed` (or, where the memory cgroup counts a
kill, `oom`) attempt for a process that ended before it could write one: killed, or, in a named
environment, never able to start the workload (no torch, a Python too old, a venv that is not
there: its last line of stderr says which). The local executor (orchestrator/executors/local.py) starts these
in turn; each Slurm task starts its own (orchestrator/executors/slurm/job.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from orchestrator.grid.cells import Cell
from workloads.contract.attempts import missing_repeats, newest_attempt, record_killed_attempt
from workloads.contract.sweep_dir import (
    LOGS_DIR,
    cell_dir,
    config_path,
    environment_launcher,
    read_cell_config,
)
from workloads.contract.vocabulary import COMPLETED, FAILED, OOM
from workloads.local.child_env import child_env

#: An Outcome's status for a cell that an earlier run completed (not run again).
SKIPPED = "skipped"


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


def _last_line(path: Path, limit: int = 65536) -> str:
    """Last non-empty line of a (possibly large) log file, '' if none."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - limit))
            lines = fh.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    return next((line.strip() for line in reversed(lines) if line.strip()), "")


def memory_oom_kills() -> int | None:
    """How many processes the kernel's OOM killer has killed in this process's memory cgroup (the
    `oom_kill` count of cgroup v1's memory.oom_control, or of v2's memory.events), None where it
    cannot be read. A cell's process is in its starter's cgroup: Slurm's step cgroup (--mem) or the node's."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    groups = {
        controllers: path.lstrip("/") for _, controllers, path in (line.split(":", 2) for line in lines)
    }
    v1 = next((path for controllers, path in groups.items() if "memory" in controllers.split(",")), None)
    if v1 is not None:
        counts = Path("/sys/fs/cgroup/memory", v1, "memory.oom_control")
    elif "" in groups:
        counts = Path("/sys/fs/cgroup", groups[""], "memory.events")
    else:
        return None
    try:
        fields = dict(line.split() for line in counts.read_text().splitlines())
        return int(fields["oom_kill"])
    except (OSError, KeyError, ValueError):
        return None


def log_paths(logs: Path, rank: int = 0) -> tuple[Path, Path]:
    """stdout and stderr of a cell's process: `stdout.log`/`stderr.log` for rank 0 (every
    single-process cell), `stdout.rank<N>.log`/`stderr.rank<N>.log` for rank N of a distributed cell."""
    suffix = f".rank{rank}" if rank else ""
    return logs / f"stdout{suffix}.log", logs / f"stderr{suffix}.log"


@dataclass
class CellProcess:
    """A started `python -m workloads.run` process of one replicate (or rank) of a cell."""

    sweep_dir: Path
    cell_id: str
    rank: int
    repeat: int
    process: subprocess.Popen
    attempts_before: int
    stderr_log: Path
    environment: str | None = None
    """The named environment it runs in (`environment=NAME`); None: this Python."""
    oom_kills_before: int | None = field(default_factory=memory_oom_kills)
    started_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.process.kill()
        self.process.wait()

    def finish(self, since: float) -> Outcome:
        """Wait for the process to end and say how the replicate went; `since` (perf_counter)
        is when it began to count, for the Outcome's seconds."""
        try:
            code = self.process.wait()
        except BaseException:  # Ctrl-C, or the task being cancelled: the child goes with us
            self.kill()
            raise
        seconds = time.perf_counter() - since
        directory = cell_dir(self.sweep_dir, self.cell_id)
        if code == 0:
            # Rank 0 writes the results, and may not have yet: another rank goes by its exit code.
            if self.rank > 0 or self.repeat not in missing_repeats(directory, self.repeat + 1):
                return Outcome(self.cell_id, COMPLETED, seconds)
            # Trust the file, not the exit code: a re-run skips only what run.parquet says is done.
            return Outcome(self.cell_id, FAILED, seconds, "exit 0 but run.parquet has no completed attempt")

        # The workload records why in run.parquet (oom, not_compiled, ...) unless it died before;
        # only rank 0 records, so another rank's reason is its own last words.
        attempts, status, error = (
            newest_attempt(directory) if self.rank == 0 else (self.attempts_before, None, None)
        )
        wrote_attempt = attempts > self.attempts_before
        # Recorded: a process killed by a signal it could not catch, and one of a named environment
        # that ended without a result (the environment could not start the workload). A process of
        # this Python's that did is a job failure that the logs and the scheduler explain.
        if self.rank == 0 and not wrote_attempt and (code < 0 or self.environment is not None):
            if code < 0:
                status, reason = self._killed(signal.Signals(-code).name)
            else:
                last_words = _last_line(self.stderr_log) or "(no output)"
                status, reason = FAILED, f"ended before it wrote a result: {last_words}"
            try:
                record_killed_attempt(directory, self.cell_id, self.repeat, status, reason, self.started_at)
            except OSError as exc:  # a full filesystem, as the cell's own write found it
                reason += f" (not recorded: {exc})"
            return Outcome(self.cell_id, status, seconds, f"exit {code}: {reason} [{self.stderr_log}]")
        status = status if wrote_attempt and status and status != COMPLETED else FAILED
        if wrote_attempt and isinstance(error, str) and error.strip():
            reason = error.strip().splitlines()[0]  # the workload's own one-line reason
        else:
            reason = _last_line(self.stderr_log) or "(no output)"  # e.g. the exception of a traceback
        return Outcome(self.cell_id, status, seconds, f"exit {code}: {reason} [{self.stderr_log}]")

    def _killed(self, signal_name: str) -> tuple[str, str]:
        """The status and error of the process killed by `signal_name` before it wrote a result:
        `oom` where its memory cgroup counts an OOM kill more than when it started."""
        after = memory_oom_kills()
        if self.oom_kills_before is not None and after is not None and after > self.oom_kills_before:
            return OOM, (
                f"killed by the kernel's OOM killer ({signal_name}): the memory limit of its cgroup "
                "(Slurm's --mem) or the node's memory was reached"
            )
        return FAILED, f"killed by {signal_name} before it wrote a result"


def start_cell(
    sweep_dir: Path, cell_id: str, rank: int = 0, repeat: int = 0, env: dict[str, str] | None = None
) -> CellProcess:
    """Start replicate `repeat` of one cell (in a distributed cell, this task's rank of it) as a
    subprocess whose stdout/stderr go to the cell's logs/ (see `log_paths`); `env` adds variables."""
    directory = cell_dir(sweep_dir, cell_id)
    logs = directory / LOGS_DIR
    logs.mkdir(parents=True, exist_ok=True)
    attempts_before = newest_attempt(directory)[0]
    environment = read_cell_config(directory, None).get("environment")
    python = ["bash", str(environment_launcher(sweep_dir, environment))] if environment else [sys.executable]
    command = [
        *python,
        "-m",
        "workloads.run",
        str(config_path(sweep_dir, cell_id)),
        "--repeat",
        str(repeat),
    ]
    stdout_log, stderr_log = log_paths(logs, rank)
    with open(stdout_log, "ab") as out, open(stderr_log, "ab") as err:  # the child keeps its own copies
        process = subprocess.Popen(
            command, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=child_env(env)
        )
    return CellProcess(sweep_dir, cell_id, rank, repeat, process, attempts_before, stderr_log, environment)


def run_cell_process(sweep_dir: Path, cell: Cell | str, rank: int = 0, repeat: int = 0) -> Outcome:
    """Run replicate `repeat` of one cell (a Cell or its id) in a subprocess — in a distributed
    cell, this task's rank of it — and wait for it."""
    cell_id = cell if isinstance(cell, str) else cell.cell_id
    since = time.perf_counter()
    return start_cell(sweep_dir, cell_id, rank, repeat).finish(since)
