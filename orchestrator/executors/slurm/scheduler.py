"""Asking Slurm: the one place that runs squeue, sacct and sinfo.

Every query has the same short timeout and answers None when the command is missing, fails or
does not answer in time (a SLURM_CONF that names no file makes squeue retry for a minute), so no
caller can hang on a broken scheduler: each decides what an unanswered query means.
"""

from __future__ import annotations

import getpass
import re
import subprocess
from collections.abc import Sequence

#: Seconds a scheduler query may take; a query that takes longer is treated as unanswered.
QUERY_TIMEOUT_S = 10

#: Slurm job states (squeue %T, sacct State) -> cell state.
SLURM_STATES = {
    "PENDING": "pending",
    "REQUEUED": "pending",
    "REQUEUE_FED": "pending",
    "REQUEUE_HOLD": "pending",
    "CONFIGURING": "pending",
    "RESV_DEL_HOLD": "pending",
    "RUNNING": "running",
    "COMPLETING": "running",
    "STAGE_OUT": "running",
    "SIGNALING": "running",
    "SUSPENDED": "running",
    "STOPPED": "running",
    "RESIZING": "running",
    "TIMEOUT": "timeout",
    "DEADLINE": "timeout",
    "CANCELLED": "cancelled",
    "OUT_OF_MEMORY": "oom",
    "FAILED": "failed",
    "BOOT_FAIL": "failed",
    "PREEMPTED": "failed",
    "SPECIAL_EXIT": "failed",
    "REVOKED": "failed",
    # Gone without a result, by no fault of the cell: its node died (a job that may be requeued,
    # as by default, is PENDING again instead), or the job ended well but the cell wrote nothing.
    "NODE_FAIL": "lost",
    "COMPLETED": "lost",
}


def query(*command: str) -> str | None:
    """stdout of a scheduler query, or None when it is missing, fails or takes too long."""
    try:
        out = subprocess.run(
            command, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def queued_jobs() -> dict[str, str] | None:
    """{job id (`123_4`, `125`): Slurm state} of this user's jobs in the queue, or None when squeue
    cannot tell."""
    out = query("squeue", "-h", "-r", "-u", getpass.getuser(), "-o", "%i|%T")
    return None if out is None else parse_states(out)


def minutes(limit: str) -> int | None:
    """A Slurm time limit as sinfo prints it (`infinite`, `30`, `2:00:00`, `1-00:00:00`) in whole
    minutes, seconds rounded down; None for no limit (or a form this parser does not know)."""
    days, _, clock = limit.strip().rpartition("-")
    parts = clock.split(":")
    if not all(part.isdigit() for part in [*parts, *([days] if days else [])]) or len(parts) > 3:
        return None
    if len(parts) == 3:  # hours:minutes:seconds
        hours, mins = int(parts[0]), int(parts[1])
    elif days:  # days-hours[:minutes]
        hours, mins = int(parts[0]), int(parts[1]) if len(parts) == 2 else 0
    else:  # minutes[:seconds]
        hours, mins = 0, int(parts[0])
    return (int(days or 0) * 24 + hours) * 60 + mins


def partition_limits() -> dict[str, int | None] | None:
    """{partition: its time limit in minutes, None for none} of what `sinfo` lists, or None when
    there is no Slurm to ask."""
    out = query("sinfo", "-h", "-o", "%R|%l")
    if out is None:
        return None
    pairs = (line.strip().partition("|") for line in out.splitlines() if line.strip())
    return {name: minutes(limit) for name, _, limit in pairs}


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


def job_states(job_ids: Sequence[str]) -> dict[str, str] | None:
    """Slurm state of each of these jobs that squeue or sacct knows; None when squeue cannot
    be asked at all (then nothing can be said about the jobs)."""
    if not job_ids:
        return {}
    queue = query("squeue", "-h", "-r", "-t", "all", "-u", getpass.getuser(), "-o", "%i|%T")
    states = parse_states(queue) if queue is not None else {}
    missing = [job_id for job_id in job_ids if job_id not in states]
    if missing:  # the controller has forgotten them: accounting, where it exists, remembers
        arrays = sorted({job_id.split("_")[0] for job_id in missing})
        accounting = query("sacct", "-X", "-n", "-P", "-j", ",".join(arrays), "-o", "JobID,State")
        if accounting is not None:
            states.update({k: v for k, v in parse_states(accounting).items() if k not in states})
        elif queue is None:
            return None
    return states
