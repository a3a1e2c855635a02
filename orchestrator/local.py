"""Local executor: run the cells of a grid one after another on this machine.

Each cell is its own `python -m workloads.run CONFIG` process, exactly what a Slurm job runs,
so a crash, an OOM or a stuck compile in one cell cannot take the sweep (or the next cell's
measurements, through a warm dynamo cache) with it. Every cell is attempted even when some
fail; the caller turns the outcomes into the exit code.

While one replicate runs, the next ones' processes are already started (a few at once, one per
4 CPUs: `processes_ahead`): each imports torch and its model's library (seconds each) and waits
for its turn before it touches the device; the one running waits, before its measured steps,
until the others have finished importing. The turn passes on when the one running has written
its results, while it exits (the protocol is in workloads/local/turns.py). Only one process at a time
builds, compiles and measures on the device.

Compile caches as `cluster.compile_cache` says, through the workload's own mechanism
(workloads/instruments/compile_cache.py, COMPILEBENCH_COMPILE_CACHE): `shared` (the local profile's default)
= SWEEP_DIR/compile_cache, so a sweep's replicates and cells after the first compile warm, and
each run row says whether it did; `per_job` = a fresh directory per process, removed when it has
ended: every replicate compiles cold.

A distributed cell (several processes) is not for this executor: it starts one process per
cell and is no launcher; Slurm starts a distributed cell's processes, one task each, and each
task runs `run_cell_process` for its rank (orchestrator/slurm_job.py).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from workloads.cell.config import distributed_section
from workloads.contract.atomic import atomic_output
from workloads.contract.sweep_dir import (
    COMPILE_CACHE_DIR,
    LOGS_DIR,
    cell_dir,
    config_path,
    missing_repeats,
    newest_attempt,
    record_killed_attempt,
)
from workloads.contract.vocabulary import COMPLETED, FAILED, OOM
from workloads.instruments.compile_cache import BASE_ENV
from workloads.local import turns
from workloads.local.child_env import child_env

if TYPE_CHECKING:  # grid imports Hydra and torch; run_cell_process in a Slurm task needs neither
    from orchestrator.grid import Cell, Grid

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


def why_not_local(grid: Grid) -> str | None:
    """Why the local executor cannot run this grid (cells of several processes), or None."""
    many = [cell.cell_id for cell in grid.cells if distributed_section(cell.config).world_size > 1]
    if not many:
        return None
    return (
        f"{len(many)} cell(s) train as several processes (distributed.nodes x tasks_per_node > 1, e.g. "
        f"{many[0]}); the local executor runs one process per cell: use a Slurm cluster profile"
    )


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
        if code < 0 and self.rank == 0 and not wrote_attempt:  # killed by a signal it could not catch
            status, reason = self._killed(signal.Signals(-code).name)
            record_killed_attempt(directory, self.cell_id, self.repeat, status, reason, self.started_at)
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
    command = [
        sys.executable,
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
    return CellProcess(sweep_dir, cell_id, rank, repeat, process, attempts_before, stderr_log)


def run_cell_process(sweep_dir: Path, cell: Cell | str, rank: int = 0, repeat: int = 0) -> Outcome:
    """Run replicate `repeat` of one cell (a Cell or its id) in a subprocess — in a distributed
    cell, this task's rank of it — and wait for it."""
    cell_id = cell if isinstance(cell, str) else cell.cell_id
    since = time.perf_counter()
    return start_cell(sweep_dir, cell_id, rank, repeat).finish(since)


def processes_ahead(cpus: int | None = None) -> int:
    """How many replicates' processes the local executor starts ahead at once. Their imports run
    side by side (a CPU each, seconds each) while the device runs the replicate before them, and
    the replicate whose turn starts a batch waits for the whole batch before it measures: so the
    more CPUs, the more at once (4 at most: each waiting process holds its imports' memory, about
    half a gigabyte); one on a small machine, where side-by-side imports would only queue."""
    cpus = cpus or len(os.sched_getaffinity(0))
    return max(1, min(4, cpus // 4))


class _Turns:
    """The executor's side of workloads/local/turns.py: a directory of its own, the `turn` file, an
    `importing.<index>` file per process started ahead until it has imported, and the
    `leaving.<index>` file a process writes when it is done with the device. With
    `compile_cache=per_job` it also holds each process's `compile_cache.<index>`."""

    def __init__(self, directory: Path, compile_cache: str):
        self.directory = directory
        self.compile_cache = compile_cache

    def _cache(self, sweep_dir: Path, index: int) -> Path:
        if self.compile_cache == "shared":
            return Path(sweep_dir) / COMPILE_CACHE_DIR
        return self.directory / f"compile_cache.{index}"

    def start(self, sweep_dir: Path, cell: Cell, repeat: int, index: int) -> CellProcess:
        marker = self.directory / f"{turns.IMPORTING_PREFIX}{index}"
        marker.touch()  # before the process exists: the one measuring must not miss it
        env = {
            turns.DIR_ENV: str(self.directory),
            turns.INDEX_ENV: str(index),
            BASE_ENV: str(self._cache(sweep_dir, index)),
        }
        started = start_cell(sweep_dir, cell.cell_id, repeat=repeat, env=env)
        with contextlib.suppress(FileNotFoundError):  # a process that ends at once takes it with it
            with open(marker, "r+") as fh:
                fh.write(str(started.process.pid))  # so that a process that died is not waited for
        return started

    def give(self, index: int) -> None:
        with atomic_output(self.directory / turns.TURN_FILE) as fh:  # whole, never half-written
            fh.write(str(index).encode())

    def wait_done_with_device(self, index: int, running: CellProcess) -> None:
        """Until process `index` has handed the device over (its results written) or exited."""
        leaving = self.directory / f"{turns.LEAVING_PREFIX}{index}"
        while running.process.poll() is None and not leaving.exists():
            time.sleep(turns.POLL_S)

    def ended(self, index: int) -> None:
        """Process `index` is gone: it imports and exits no more, whatever it managed to say."""
        for prefix in (turns.IMPORTING_PREFIX, turns.LEAVING_PREFIX):
            (self.directory / f"{prefix}{index}").unlink(missing_ok=True)
        shutil.rmtree(self.directory / f"compile_cache.{index}", ignore_errors=True)  # per_job's


@contextlib.contextmanager
def _turns(compile_cache: str) -> Iterator[_Turns]:
    with tempfile.TemporaryDirectory(prefix="compilebench-turns-") as directory:
        yield _Turns(Path(directory), compile_cache)


def run_grid(grid: Grid, out: TextIO | None = None, ahead: int | None = None) -> list[Outcome]:
    """Run every replicate of every cell not completed before, in `Grid.replicates` order,
    printing one progress line each. Each replicate gets its turn when the one before has handed
    the device over; when none is waiting behind the one given its turn, the next `ahead`
    replicates to run (default `processes_ahead()`) are started at once (module doc)."""
    out = sys.stdout if out is None else out  # looked up per call: tests and callers redirect it
    outcomes: list[Outcome] = []
    todo = grid.replicates()
    ahead = ahead or processes_ahead()

    @functools.cache  # asked when a replicate is looked ahead to and again in its turn: read once
    def to_run(index: int) -> bool:
        cell, repeat = todo[index]
        return repeat in missing_repeats(cell_dir(grid.sweep_dir, cell.cell_id), cell.repeats)

    with _turns(str(grid.cluster.get("compile_cache") or "per_job")) as turns_dir:
        waiting: dict[int, CellProcess] = {}  # started ahead, by index, in order
        given: dict[int, float] = {}  # when each got its turn (perf_counter)

        def give(index: int) -> None:
            turns_dir.give(index)
            given[index] = time.perf_counter()
            if not any(i > index for i in waiting):  # the next batch imports while this one runs
                following = [i for i in range(index + 1, len(todo)) if to_run(i)][:ahead]
                waiting.update((i, turns_dir.start(grid.sweep_dir, *todo[i], i)) for i in following)

        try:
            for index, (cell, repeat) in enumerate(todo):
                run = f" run {repeat + 1}/{cell.repeats}" if cell.repeats > 1 else ""
                print(
                    f"[{index + 1}/{len(todo)}] {cell.label}{run} ({cell.cell_id}) ... ",
                    end="",
                    file=out,
                    flush=True,
                )
                if index in waiting:  # its turn was given when the one before handed over
                    current = waiting.pop(index)
                elif to_run(index):
                    current = turns_dir.start(grid.sweep_dir, cell, repeat, index)
                    give(index)
                else:
                    outcomes.append(Outcome(cell.cell_id, SKIPPED))
                    print("already completed", file=out, flush=True)
                    continue
                turns_dir.wait_done_with_device(index, current)
                if waiting:
                    give(next(iter(waiting)))  # the next starts while this one exits
                outcome = current.finish(given[index])
                turns_dir.ended(index)
                detail = f": {outcome.message}" if outcome.message else ""
                print(f"{outcome.status} in {outcome.seconds:.1f} s{detail}", file=out, flush=True)
                outcomes.append(outcome)
        finally:
            for started in waiting.values():  # interrupted, or replicates started for nothing
                started.kill()
    return outcomes
