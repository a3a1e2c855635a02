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
cell and is no launcher (`LocalExecutor.plan` refuses it). A packed Slurm array task runs its cells
through the same `run_replicates` (orchestrator/executors/slurm/packed_task.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from orchestrator.executors.base import GONE, Executor, ExecutorError, JobState, Ran
from orchestrator.executors.cell_process import SKIPPED, CellProcess, Outcome, start_cell
from orchestrator.grid.cells import Cell, Grid
from workloads.cell.config_io import distributed_section
from workloads.contract.atomic import atomic_output
from workloads.contract.attempts import missing_repeats
from workloads.contract.sweep_dir import COMPILE_CACHE_DIR, cell_dir
from workloads.instruments.compile_cache import BASE_ENV
from workloads.local import turns


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

    def __init__(self, directory: Path, compile_cache: str | None):
        self.directory = directory
        self.compile_cache = compile_cache

    def _cache(self, sweep_dir: Path, index: int) -> dict[str, str]:
        if self.compile_cache is None:  # a packed Slurm task: the job's, as its script exported it
            return {}
        if self.compile_cache == "shared":
            return {BASE_ENV: str(Path(sweep_dir) / COMPILE_CACHE_DIR)}
        return {BASE_ENV: str(self.directory / f"compile_cache.{index}")}

    def start(self, sweep_dir: Path, cell: Cell, repeat: int, index: int) -> CellProcess:
        marker = self.directory / f"{turns.IMPORTING_PREFIX}{index}"
        marker.touch()  # before the process exists: the one measuring must not miss it
        env = {
            turns.DIR_ENV: str(self.directory),
            turns.INDEX_ENV: str(index),
            **self._cache(sweep_dir, index),
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
def _turns(compile_cache: str | None) -> Iterator[_Turns]:
    with tempfile.TemporaryDirectory(prefix="compilebench-turns-") as directory:
        yield _Turns(Path(directory), compile_cache)


def run_replicates(
    sweep_dir: Path,
    todo: Sequence[tuple[Cell, int]],
    compile_cache: str | None,
    out: TextIO | None = None,
    ahead: int | None = None,
    on_turn: Callable[[int, CellProcess], None] | None = None,
) -> list[Outcome]:
    """Run these replicates, in order, those not completed before, printing one progress line
    each. Each replicate gets its turn when the one before has handed the device over; when none
    is waiting behind the one given its turn, the next `ahead` replicates to run (default
    `processes_ahead()`) are started at once (module doc). `compile_cache`: shared, per_job, or
    None for the one this process's environment names (a packed Slurm task's); `on_turn(index,
    its process)` is called before each turn is given (and may raise to give no more)."""
    out = sys.stdout if out is None else out  # looked up per call: tests and callers redirect it
    outcomes: list[Outcome] = []
    ahead = ahead or processes_ahead()

    @functools.cache  # asked when a replicate is looked ahead to and again in its turn: read once
    def to_run(index: int) -> bool:
        cell, repeat = todo[index]
        return repeat in missing_repeats(cell_dir(sweep_dir, cell.cell_id), cell.repeats)

    with _turns(compile_cache) as turns_dir:
        waiting: dict[int, CellProcess] = {}  # started ahead, by index, in order
        given: dict[int, float] = {}  # when each got its turn (perf_counter)

        def give(index: int, started: CellProcess) -> None:
            if on_turn is not None:
                on_turn(index, started)
            turns_dir.give(index)
            given[index] = time.perf_counter()
            if not any(i > index for i in waiting):  # the next batch imports while this one runs
                following = [i for i in range(index + 1, len(todo)) if to_run(i)][:ahead]
                waiting.update((i, turns_dir.start(sweep_dir, *todo[i], i)) for i in following)

        try:
            for index, (cell, repeat) in enumerate(todo):
                most = f"≤ {cell.repeats}, auto" if cell.auto else cell.repeats
                run = f" run {repeat + 1}/{most}" if cell.repeats > 1 else ""
                print(
                    f"[{index + 1}/{len(todo)}] {cell.label}{run} ({cell.cell_id}) ... ",
                    end="",
                    file=out,
                    flush=True,
                )
                if index in waiting:  # its turn was given when the one before handed over
                    current = waiting.pop(index)
                elif to_run(index):
                    current = turns_dir.start(sweep_dir, cell, repeat, index)
                    give(index, current)
                else:
                    outcomes.append(Outcome(cell.cell_id, SKIPPED))
                    print("already completed", file=out, flush=True)
                    continue
                turns_dir.wait_done_with_device(index, current)
                if waiting:
                    give(*next(iter(waiting.items())))  # the next starts while this one exits
                outcome = current.finish(given[index])
                turns_dir.ended(index)
                detail = f": {outcome.message}" if outcome.message else ""
                print(f"{outcome.status} in {outcome.seconds:.1f} s{detail}", file=out, flush=True)
                outcomes.append(outcome)
        finally:
            for started in waiting.values():  # interrupted, or replicates started for nothing
                started.kill()
    return outcomes


@dataclass(frozen=True)
class LocalPlan:
    grid: Grid
    only: frozenset[str] | None
    """The cells to run again (`status --retry-failed`), None for the whole sweep."""
    replicates: tuple[tuple[Cell, int], ...] | None = None
    """These replicates (a round of repeats=auto), None for `Grid.replicates` of the cells."""

    def cells(self) -> Grid:
        if self.only is None:
            return self.grid
        return dataclasses.replace(self.grid, cells=[c for c in self.grid.cells if c.cell_id in self.only])

    def todo(self) -> list[tuple[Cell, int]]:
        return list(self.cells().replicates() if self.replicates is None else self.replicates)


class LocalExecutor(Executor[LocalPlan]):
    """The cells here, one process each, in turn (module doc)."""

    name = "local"
    foreground = True

    def plan(
        self,
        grid: Grid,
        only: Collection[str] | None = None,
        replicates: Sequence[tuple[Cell, int]] | None = None,
    ) -> LocalPlan:
        many = [cell.cell_id for cell in grid.cells if distributed_section(cell.config).world_size > 1]
        if many:
            raise ExecutorError(
                f"{len(many)} cell(s) train as several processes (distributed.nodes x tasks_per_node > 1, "
                f"e.g. {many[0]}); the local executor runs one process per cell: use a Slurm cluster profile"
            )
        return LocalPlan(
            grid, None if only is None else frozenset(only), None if replicates is None else tuple(replicates)
        )

    def rows(self, plan: LocalPlan) -> list[dict[str, Any]]:
        return plan.cells().rows()

    def dry_run(self, plan: LocalPlan) -> str:
        grid = plan.cells()
        repeats = grid.auto_note()
        return f"{len(grid.cells)} cell(s) for {grid.sweep_dir}{repeats}; nothing written or run (--dry-run)"

    def run(self, plan: LocalPlan) -> Ran:
        """Run the replicates here, with the compile caches `cluster.compile_cache` says."""
        from orchestrator.grid.profile import SlurmProfile  # OmegaConf: not in a packed task's runner

        cache = plan.grid.cluster.get("compile_cache") or SlurmProfile.compile_cache  # null: the default
        return Ran(outcomes=run_replicates(plan.grid.sweep_dir, plan.todo(), cache))

    def poll(self, sweep_dir: Path, job_ids: Sequence[str]) -> dict[str, JobState]:
        """None of its: a local run is in the foreground and records no job (its cells, their results)."""
        return dict.fromkeys(job_ids, JobState(GONE, "job unknown to the local executor, no result"))
