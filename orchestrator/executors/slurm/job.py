"""What one Slurm array task runs: `CellJob()(sweep_dir, cell_id, repeat)`, called by submitit in the
job (a task of several cells, `cluster.cells_per_task` > 1, runs
orchestrator/executors/slurm/packed_task.py instead).

It runs the cell exactly as the local executor does (`python -m workloads.run CONFIG` in a
subprocess, stdout/stderr appended to `cells/<id>/logs/stdout.log` and `stderr.log`), and makes the
job findable from the cell: `logs/slurm-<job>.out` / `.err` are symlinks to submitit's log files
of the task under `SWEEP_DIR/submitit/`, and `logs/slurm-<job>.env` lists the Slurm, submitit and
compile-cache variables the task saw (to check that nothing leaked in from the submitting shell).

A cell that does not complete raises CellFailed, so that the Slurm job ends FAILED and submitit's
`job.result()` raises; the cell's own status (oom, not_compiled, ...) is in its run.parquet.

A distributed cell's job has one task per process (`--ntasks-per-node`, `--nodes`); submitit's
srun runs this function in each. Before the workload starts, the task exports torch's env://
variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR = the job's first node, MASTER_PORT drawn
from the job id) through submitit's TorchDistributedEnvironment, and the workload joins the
group from them. Rank N > 0 logs to `stdout.rankN.log`/`stderr.rankN.log` and
`slurm-<job>.rankN.*`; rank 0 keeps the single-process names and alone writes the results.
CUDA_VISIBLE_DEVICES is left as Slurm set it (the job's GPUs): the workload trains on the
LOCAL_RANK-th of them, which stays right where Slurm does not renumber devices per job.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

from orchestrator.executors.cell_process import SKIPPED, Outcome, log_paths, run_cell_process
from orchestrator.executors.slurm.packing import place_job_id
from workloads.contract.attempts import missing_repeats, newest_attempt
from workloads.contract.sweep_dir import LOGS_DIR, cell_dir
from workloads.instruments.compile_cache import BASE_ENV

#: Variables written to logs/slurm-<job>.env: names starting with these, or equal to them.
ENV_PREFIXES = (
    "SLURM_",
    "SBATCH_",
    "SRUN_",
    "SUBMITIT_",
    "TORCHINDUCTOR_",
    "TRITON_",
    "MASTER_",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    BASE_ENV,
)


#: Seconds a task waits, on SIGUSR2, for the cell's process to record its `timeout` (Slurm sends
#: USR2 90 s before the limit, and may send it up to 60 s early).
RECORD_WAIT_S = 60


class CellFailed(RuntimeError):
    """The cell ran and did not complete; the message is its outcome's one-line reason."""


def _link(target: Path, link: Path) -> None:
    """A relative symlink `link` -> `target` (replaced if it exists), so the sweep directory can move."""
    link.unlink(missing_ok=True)
    link.symlink_to(os.path.relpath(target, link.parent))


def record_job(logs: Path, place: int | None = None) -> str:
    """Link the task's submitit logs into `logs` and write the env file; returns the job id (of a
    packed task's replicate at `place`: `<task>.<place>`, orchestrator/executors/slurm/packing.py)."""
    import submitit  # in the job only: the submitting side never needs this module's imports

    environment = submitit.JobEnvironment()
    job_id = environment.job_id  # "<array job>_<task>" in an array, "<job>" for a lone job
    if place is not None:
        job_id = place_job_id(job_id, place)
    name = f"slurm-{job_id}" + (f".rank{environment.global_rank}" if environment.global_rank else "")
    paths = environment.paths
    _link(paths.stdout, logs / f"{name}.out")
    _link(paths.stderr, logs / f"{name}.err")
    names = sorted(k for k in os.environ if k.startswith(ENV_PREFIXES))
    (logs / f"{name}.env").write_text("".join(f"{k}={os.environ[k]}\n" for k in names))
    return job_id


def export_torch_distributed() -> int:
    """Export this task's torch.distributed env:// variables from the Slurm job; returns its rank."""
    from submitit.helpers import TorchDistributedEnvironment

    # CUDA_VISIBLE_DEVICES stays Slurm's (see the module docstring); overwrite: the job's own
    # values, whatever the submitting environment passed on.
    return TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True).rank


class CellJob:
    """What a task runs (submitit pickles it): `CellJob()(sweep_dir, cell_id)` runs the cell.

    Time limits: submitit asks Slurm for SIGUSR2 shortly before a job's limit (`--signal=USR2@90`),
    which Slurm sends to every process of the job step: the cell's process records `timeout` and
    stops (workloads/run.py), and submitit's handler in this task calls `checkpoint`, which waits
    for that record and hands submitit the same call again, so that submitit requeues the job —
    the next attempt of the cell — as long as the profile's `max_requeue` (submitit's
    max_num_timeout, counted down per requeue) allows; then the job ends with the cell's `timeout`.
    """

    def __init__(self) -> None:
        self._started: tuple[Path, int] | None = None  # the cell's directory, attempts before this job's

    def __call__(self, sweep_dir: str, cell_id: str, repeat: int = 0) -> Outcome:
        directory = cell_dir(Path(sweep_dir), cell_id)
        self._started = (directory, newest_attempt(directory)[0])
        return run_cell_job(sweep_dir, cell_id, repeat)

    def checkpoint(self, sweep_dir: str, cell_id: str, repeat: int = 0) -> Any:
        """Called by submitit on SIGUSR2 in rank 0's task: let the cell record its `timeout`
        (forwarding the signal in case Slurm's did not reach it), then requeue the same call."""
        from submitit.helpers import DelayedSubmission

        for pid in live_children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGUSR2)
        if self._started is not None:
            directory, attempts = self._started
            deadline = time.monotonic() + RECORD_WAIT_S
            while (
                newest_attempt(directory)[0] <= attempts and live_children() and time.monotonic() < deadline
            ):
                time.sleep(0.2)
        return DelayedSubmission(CellJob(), sweep_dir, cell_id, repeat)


def live_children() -> list[int]:
    """Pids of this process's live children (the cell's process), from /proc."""
    me, found = str(os.getpid()), []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if fields[1] == me and fields[0] != "Z":
                found.append(int(stat.parent.name))
    return found


def run_cell_job(sweep_dir: str, cell_id: str, repeat: int = 0) -> Outcome:
    """Run replicate `repeat` of one cell in a Slurm job (skipping it if an earlier job completed it)."""
    directory = cell_dir(Path(sweep_dir), cell_id)
    logs = directory / LOGS_DIR
    logs.mkdir(parents=True, exist_ok=True)
    rank = export_torch_distributed()
    job_id = record_job(logs)
    if repeat not in missing_repeats(directory, repeat + 1):
        print(f"cell {cell_id} (replicate {repeat}): completed by an earlier job; nothing to do")
        return Outcome(cell_id, SKIPPED)
    stdout_log, stderr_log = log_paths(logs, rank)
    print(f"cell {cell_id}: running in job {job_id}; its output: {stdout_log}, {stderr_log}", flush=True)
    outcome = run_cell_process(Path(sweep_dir), cell_id, rank, repeat)
    print(
        f"cell {cell_id}: {outcome.status} in {outcome.seconds:.1f} s {outcome.message}".rstrip(), flush=True
    )
    if not outcome.ok:
        raise CellFailed(f"cell {cell_id} {outcome.status}: {outcome.message}")
    return outcome
