"""The sbatch script of a job array: submitit's parameters from a profile, and the script text.

The text is always produced by submitit's own `SlurmExecutor._make_submission_file_text` (its
`_make_sbatch_string`), for a dry run as for a submission, so what `--dry-run` writes is what
`sbatch` gets. compilebench contributes only parameters and the `# setup` lines:

1. the site preamble from `sbatch_templates/<profile.sbatch_template>.sh.tmpl`, filled from the
   profile with every value shell-quoted;
2. the profile's `setup` lines, verbatim (shell written by the profile's author);
3. the compile-cache lines of `cluster.compile_cache` (`compile_cache_lines`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from submitit import SlurmExecutor

from orchestrator.grid.environments import template_lines, template_path
from orchestrator.grid.private_apis import RenderOnlyExecutor, convert_mem, submission_script_text
from orchestrator.grid.profile import ProfileError, Resources, SlurmProfile
from workloads.contract.sweep_dir import COMPILE_CACHE_DIR, SUBMITIT_DIR
from workloads.instruments.compile_cache import BASE_ENV

#: Every job's name starts with this; the sweep directory's name follows (`job_name`).
JOB_NAME = "compilebench"
#: What a job name keeps of the sweep directory's name; anything else becomes `_`.
_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+")

_OPTION = re.compile(r"[a-z][a-z0-9_-]*")


def preamble_lines(profile: SlurmProfile) -> list[str]:
    """The site template filled from the profile (see sbatch_templates/README.md)."""
    return template_lines(template_path(profile.sbatch_template, profile.name), profile)


def compile_cache_lines(policy: str, sweep_dir: Path) -> list[str]:
    """The job's compile-cache base directory for `cluster.compile_cache`, exported as
    COMPILEBENCH_COMPILE_CACHE; the workload points inductor and triton into a subdirectory keyed
    by its GPU and versions (workloads/instruments/compile_cache.py)."""
    if policy == "shared":  # one cache for the sweep: cells after the first compile warm
        return [f"export {BASE_ENV}={shlex.quote(str(Path(sweep_dir) / COMPILE_CACHE_DIR))}"]
    # per_job: a fresh directory on the node, removed when the job script ends: every cell compiles cold
    return [
        f'export {BASE_ENV}="$(mktemp -d "${{TMPDIR:-/tmp}}/compilebench-compile-cache.XXXXXX")"',
        f"trap 'rm -rf \"${BASE_ENV}\"' EXIT",
    ]


def job_name(sweep_dir: Path) -> str:
    """`compilebench-<sweep directory's name>` (at most 64 characters), so that `squeue` tells one
    sweep's jobs from another's; spaces and shell characters of the name become `_`."""
    name = _NAME_CHARS.sub("_", Path(sweep_dir).name).strip("_")
    return f"{JOB_NAME}-{name}"[:64] if name else JOB_NAME


def slurm_parameters(profile: SlurmProfile, resources: Resources, sweep_dir: Path) -> dict[str, Any]:
    """submitit `SlurmExecutor.update_parameters` keywords for one job array."""
    params: dict[str, Any] = {
        "job_name": job_name(sweep_dir),
        "partition": resources.partition,
        "time": resources.time_min,
        # --signal=USR2@N: the cell records `timeout` and the job is requeued
        # (orchestrator/executors/slurm/job.py)
        "signal_delay_s": profile.signal_delay_s,
        "array_parallelism": profile.array_parallelism,
        "setup": [
            *preamble_lines(profile),
            *profile.setup,
            *compile_cache_lines(profile.compile_cache, sweep_dir),
        ],
    }
    if resources.gres:
        params["gres"] = resources.gres
    srun_args = []
    if resources.tasks > 1:  # a distributed cell: submitit's srun starts one task per process
        params["nodes"] = resources.nodes
        params["ntasks_per_node"] = resources.tasks_per_node
        # A rank that dies leaves the others blocked in a collective (NCCL: until its timeout);
        # Slurm ends the step instead, and rank 0 records what it saw.
        srun_args.append("--kill-on-bad-exit=1")
    if resources.cpus:
        params["cpus_per_task"] = resources.cpus
        # The step must get the job's CPUs too: srun of Slurm 22.05+ no longer reads SLURM_CPUS_PER_TASK.
        srun_args.append(f"--cpus-per-task={resources.cpus}")
    if srun_args:
        params["srun_args"] = srun_args
    if resources.mem_gb:
        params["mem"] = convert_mem(resources.mem_gb)
    for key in ("account", "qos"):
        if getattr(profile, key):
            params[key] = getattr(profile, key)
    if profile.sbatch_extra:
        bad = [k for k in profile.sbatch_extra if not _OPTION.fullmatch(str(k))]
        if bad:
            raise ProfileError(
                f"cluster {profile.name}: sbatch_extra keys must be sbatch option names, got {bad}"
            )
        params["additional_parameters"] = {
            str(k): v if v is True else str(v)
            for k, v in profile.sbatch_extra.items()
            if v is not None and v is not False
        }
    return params


def make_executor(
    sweep_dir: Path, params: Mapping[str, Any], render_only: bool = False, max_requeue: int = 0
) -> SlurmExecutor:
    """submitit's executor of the sweep; `max_requeue` = how often a job stopped at its time limit
    is requeued (submitit's max_num_timeout: the job's USR2 handler counts down)."""
    cls = RenderOnlyExecutor if render_only else SlurmExecutor
    executor = cls(folder=Path(sweep_dir) / SUBMITIT_DIR, max_num_timeout=max_requeue)
    executor.update_parameters(**params)
    return executor


def script_text(sweep_dir: Path, params: Mapping[str, Any], count: int) -> str:
    """The sbatch script submitit submits for `count` calls of these parameters: a job array
    (`--array=0-N%P`) when count > 1, a plain job for one call, as `SlurmExecutor` does."""
    executor = make_executor(sweep_dir, params, render_only=True)
    return submission_script_text(executor, count)
