"""Slurm executor: the cells of a grid as submitit job arrays, submitted or only planned (--dry-run).

The plan (orchestrator/executors/slurm/plan.py) groups the replicates left to run into job arrays; `run`
submits them (orchestrator/executors/slurm/submit.py) and returns: job ids go to manifest.parquet (`<array
job>_<task>`, or `<job>` for a lone cell, which submitit submits as a plain job), the submitted
scripts to `SWEEP_DIR/sbatch/<job>.sh`. With `--wait` it then follows the jobs until none is queued.
`repeats=auto` is a plan and a wait per round, from the sweep driver (orchestrator/sweep/driver.py).
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from orchestrator.executors.base import EXIT_OK, Executor, ExecutorError, Follow, Ran
from orchestrator.executors.slurm.plan import (
    SlurmPlan,
    check_grid,
    describe_packing,
    grid_rows,
    plan,
    write_dry_run,
)
from orchestrator.grid.cells import Cell, Grid
from orchestrator.grid.environments import write_launchers
from orchestrator.grid.files import environment_names
from orchestrator.grid.profile import ProfileError
from workloads.contract.sweep_dir import SBATCH_DIR


class SlurmExecutor(Executor[SlurmPlan]):
    """Job arrays on the cluster the profile names (module doc)."""

    name = "slurm"

    def check(self, grid: Grid) -> None:
        try:
            check_grid(grid)
        except ProfileError as exc:
            raise ExecutorError(str(exc)) from None

    def plan(
        self,
        grid: Grid,
        only: Collection[str] | None = None,
        replicates: Sequence[tuple[Cell, int]] | None = None,
    ) -> SlurmPlan:
        try:
            return plan(grid, only=only, replicates=replicates)
        except ProfileError as exc:
            raise ExecutorError(str(exc)) from None

    def rows(self, plan: SlurmPlan) -> list[dict[str, Any]]:
        return grid_rows(plan)

    def dry_run(self, plan: SlurmPlan) -> str:
        paths = write_dry_run(plan)
        launchers = write_launchers(plan.grid.sweep_dir, plan.grid.cluster, environment_names(plan.grid))
        environments = (
            f"; environment launchers in {launchers[0].parent}/ ({', '.join(p.name for p in launchers)})"
            if launchers
            else ""
        )
        return (
            f"{len(plan.grid.cells)} cell(s){plan.grid.auto_note()}: {plan.cells_submitted} in "
            f"{len(paths)} job array(s){describe_packing(plan)}, "
            f"{len(plan.skipped)} not submitted (completed or queued); scripts in "
            f"{plan.grid.sweep_dir / SBATCH_DIR}/ ({', '.join(p.name for p in paths) or 'none'})"
            f"{environments}; nothing submitted (--dry-run)"
        )

    def run(self, plan: SlurmPlan, wait: Follow | None = None) -> Ran:
        from orchestrator.executors.slurm.submit import submit_plan

        grid = plan.grid
        if not plan.arrays and not plan.a_round:
            print(f"nothing to submit: {len(plan.skipped)} cell(s) completed or still queued")
        if plan.arrays:
            code = submit_plan(plan)
            if code != EXIT_OK:
                return Ran(code)
        if plan.retrying and plan.arrays:
            print(
                f"{plan.cells_submitted} cell(s) resubmitted, job ids in {grid.sweep_dir}/manifest.parquet; "
                f"follow them with: compilebench status {grid.sweep_dir}"
            )
        elif plan.arrays and not plan.a_round:
            print(
                f"{plan.cells_submitted} cell(s) submitted in {len(plan.arrays)} job array(s)"
                f"{describe_packing(plan)}, "
                f"{len(plan.skipped)} not submitted (completed or queued); job ids in "
                f"{grid.sweep_dir}/manifest.parquet, scripts in {grid.sweep_dir / SBATCH_DIR}/"
            )
        return follow_sweep(grid.sweep_dir, wait) if wait else Ran()


def follow_sweep(sweep_dir: Path, wait: Follow) -> Ran:
    """--wait: the cells per state at once, then every `poll_s` seconds until none is queued (or
    squeue has not answered for `give_up_s`): their states at the last look. Ctrl-C stops the
    waiting, not the jobs (130)."""
    from orchestrator.executors.slurm.scheduler import UNANSWERED_LIMIT_S, WAIT_INTERVAL_S
    from orchestrator.executors.status import follow

    poll_s = WAIT_INTERVAL_S if wait.poll_s is None else wait.poll_s
    give_up_s = UNANSWERED_LIMIT_S if wait.give_up_s is None else wait.give_up_s
    print(f"waiting for the jobs, a look every {poll_s:g} s (Ctrl-C stops waiting, not the jobs)", flush=True)
    try:
        return Ran(states=follow(sweep_dir, interval_s=poll_s, give_up_s=give_up_s))
    except KeyboardInterrupt:
        print(
            f"\nstopped waiting; the jobs keep running. Check them with: compilebench status {sweep_dir}",
            file=sys.stderr,
        )
        return Ran(130)
