"""Slurm executor: the cells of a grid as submitit job arrays, submitted or only planned (--dry-run).

The plan (orchestrator/slurm_plan.py) groups the cells left to run into job arrays; `run` submits
them (orchestrator/slurm_submit.py) and returns: job ids go to manifest.parquet (`<array job>_<task>`,
or `<job>` for a lone cell, which submitit submits as a plain job), the submitted scripts to
`SWEEP_DIR/sbatch/<job>.sh`. With `--wait` it then follows the jobs until none is queued.
`repeats=auto` submits round after round and follows each (it needs `--wait`: the next round is
decided from the last one's results, orchestrator/auto_repeats.py).
"""

from __future__ import annotations

import sys
from collections.abc import Collection
from pathlib import Path
from typing import Any

from orchestrator.auto_repeats import auto_note, run_rounds
from orchestrator.cells import Cell, Grid
from orchestrator.executor import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Executor, ExecutorError, Follow
from orchestrator.profile import ProfileError
from orchestrator.slurm_plan import (
    SlurmPlan,
    check_grid,
    describe_packing,
    grid_rows,
    plan,
    write_dry_run,
)
from workloads.contract.sweep_dir import SBATCH_DIR


class SlurmExecutor(Executor[SlurmPlan]):
    """Job arrays on the cluster the profile names (module doc)."""

    name = "slurm"

    def check(self, grid: Grid) -> None:
        try:
            check_grid(grid)
        except ProfileError as exc:
            raise ExecutorError(str(exc)) from None

    def plan(self, grid: Grid, only: Collection[str] | None = None) -> SlurmPlan:
        try:
            return plan(grid, only=only)
        except ProfileError as exc:
            raise ExecutorError(str(exc)) from None

    def rows(self, plan: SlurmPlan) -> list[dict[str, Any]]:
        return grid_rows(plan)

    def dry_run(self, plan: SlurmPlan) -> str:
        paths = write_dry_run(plan)
        return (
            f"{len(plan.grid.cells)} cell(s){auto_note(plan.grid)}: {plan.cells_submitted} in "
            f"{len(paths)} job array(s){describe_packing(plan)}, "
            f"{len(plan.skipped)} not submitted (completed or queued); scripts in "
            f"{plan.grid.sweep_dir / SBATCH_DIR}/ ({', '.join(p.name for p in paths) or 'none'}); "
            "nothing submitted (--dry-run)"
        )

    def run(self, plan: SlurmPlan, follow: Follow | None = None) -> int:
        from orchestrator.grid_files import prepare
        from orchestrator.slurm_submit import submit_plan

        grid = plan.grid
        auto = any(cell.auto for cell in grid.cells)
        if auto and follow is None:
            print(
                "error: repeats=auto decides between rounds, so the sweep must wait for each: run "
                "`compilebench sweep` with its overrides and --wait",
                file=sys.stderr,
            )
            return EXIT_USAGE
        if not plan.retrying:
            print(
                f"sweep: {len(grid.cells)} cell(s) -> {grid.sweep_dir} "
                f"(executor {self.name}, cluster {plan.profile.name})",
                flush=True,
            )
        if auto:
            prepare(grid)
            return run_rounds_on_slurm(grid, follow)
        if not plan.arrays:
            print(f"nothing to submit: {len(plan.skipped)} cell(s) completed or still queued")
            return follow_sweep(grid.sweep_dir, follow) if follow else EXIT_OK
        if not plan.retrying:
            prepare(grid)
        code = submit_plan(plan)
        if code != EXIT_OK:
            return code
        if plan.retrying:
            print(
                f"{plan.cells_submitted} cell(s) resubmitted, job ids in {grid.sweep_dir}/manifest.parquet; "
                f"follow them with: compilebench status {grid.sweep_dir}"
            )
        else:
            print(
                f"{plan.cells_submitted} cell(s) submitted in {len(plan.arrays)} job array(s)"
                f"{describe_packing(plan)}, "
                f"{len(plan.skipped)} not submitted (completed or queued); job ids in "
                f"{grid.sweep_dir}/manifest.parquet, scripts in {grid.sweep_dir / SBATCH_DIR}/"
            )
        return follow_sweep(grid.sweep_dir, follow) if follow else EXIT_OK


class _Stopped(Exception):
    """A round of repeats=auto that could not be submitted or waited for: the exit code."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def run_rounds_on_slurm(grid: Grid, wait: Follow) -> int:
    """repeats=auto on Slurm (orchestrator/auto_repeats.py): each round's replicates submitted as job
    arrays, then followed until none is queued (`--wait`); why each cell stopped at the end."""
    from analysis.studies.auto_repeats import auto_repeats_markdown
    from orchestrator.slurm_submit import submit_plan
    from orchestrator.status import all_completed, sweep_status

    def run_round(todo: list[tuple[Cell, int]]) -> None:
        the_round = plan(grid, replicates=todo)
        code = submit_plan(the_round) if the_round.arrays else EXIT_OK
        if code != EXIT_OK:
            raise _Stopped(code)
        # EXIT_FAILED: not every cell has completed, as none has before it stopped; a failed one
        # leaves the rounds, the others go on.
        if follow_sweep(grid.sweep_dir, wait) not in (EXIT_OK, EXIT_FAILED):
            raise _Stopped(130)  # Ctrl-C: the jobs run on, the same command goes on after them

    try:
        run_rounds(grid, run_round)
    except _Stopped as stop:
        return stop.code
    print(f"\n{auto_repeats_markdown(grid.sweep_dir, [cell.cell_id for cell in grid.cells])}")
    return EXIT_OK if all_completed(sweep_status(grid.sweep_dir)) else EXIT_FAILED


def follow_sweep(sweep_dir: Path, wait: Follow) -> int:
    """--wait: the cells per state at once, then every `poll_s` seconds until none is queued (or
    squeue has not answered for `give_up_s`), then the status table. Ctrl-C stops the waiting, not
    the jobs."""
    from orchestrator.scheduler import UNANSWERED_LIMIT_S, WAIT_INTERVAL_S
    from orchestrator.status import all_completed, follow, render
    from workloads.contract.vocabulary import UNKNOWN

    poll_s = WAIT_INTERVAL_S if wait.poll_s is None else wait.poll_s
    give_up_s = UNANSWERED_LIMIT_S if wait.give_up_s is None else wait.give_up_s
    print(f"waiting for the jobs, a look every {poll_s:g} s (Ctrl-C stops waiting, not the jobs)", flush=True)
    try:
        rows = follow(sweep_dir, interval_s=poll_s, give_up_s=give_up_s)
    except KeyboardInterrupt:
        print(
            f"\nstopped waiting; the jobs keep running. Check them with: compilebench status {sweep_dir}",
            file=sys.stderr,
        )
        return 130
    print(render(rows))
    if any(row.state == UNKNOWN for row in rows):  # follow gave up on a squeue that did not answer
        print(
            f"error: squeue has not answered for {give_up_s:g} s: stopped waiting; the jobs may still run. "
            f"Check them with: compilebench status {sweep_dir}",
            file=sys.stderr,
        )
    return EXIT_OK if all_completed(rows) else EXIT_FAILED
