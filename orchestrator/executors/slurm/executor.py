"""Slurm executor: the cells of a grid as submitit job arrays, submitted or only planned (--dry-run).

The plan (orchestrator/executors/slurm/plan.py) groups the replicates left to run into job arrays; `run`
submits them (orchestrator/executors/slurm/submit.py) and returns: job ids go to manifest.parquet (`<array
job>_<task>`, or `<job>` for a lone cell, which submitit submits as a plain job), the submitted
scripts to `SWEEP_DIR/sbatch/<job>.sh`. `poll` asks squeue and sacct where they are
(orchestrator/executors/slurm/queue.py), for `status` and for the sweep driver's `--wait`
(orchestrator/sweep/driver.py), which also runs `repeats=auto` as a plan, a run and a wait per round.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from orchestrator.executors.base import EXIT_OK, Executor, ExecutorError, JobState, Ran
from orchestrator.executors.slurm.plan import (
    SlurmPlan,
    check_grid,
    describe_packing,
    grid_rows,
    plan,
    write_dry_run,
)
from orchestrator.executors.slurm.queue import poll_jobs
from orchestrator.grid.cells import Cell, Grid
from orchestrator.grid.environments import write_launchers
from orchestrator.grid.files import environment_names
from orchestrator.grid.profile import ProfileError
from workloads.contract.sweep_dir import SBATCH_DIR


class SlurmExecutor(Executor[SlurmPlan]):
    """Job arrays on the cluster the profile names (module doc)."""

    name = "slurm"
    queue_name = "squeue"

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

    def run(self, plan: SlurmPlan) -> Ran:
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
        return Ran()

    def poll(self, sweep_dir: Path, job_ids: Sequence[str]) -> dict[str, JobState]:
        return poll_jobs(sweep_dir, job_ids)
