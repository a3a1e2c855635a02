"""Before measuring, wait until the cell's own compile workers are idle.

The inductor backend starts its compile-worker pool at its first compile
(`torch._inductor.async_compile`): a side process that imports torch, then forks its workers. Where the
compile cache is warm, the compile ends in about 3 s, before that side process has finished importing.
On the H100 machine, the inductor replicates that found a warm cache measured with one CPU busy beside
them (`node_cpus_busy_other` 0.85-1.09, against 0.01-0.06 in every other process;
docs/gpu-results.md, "paired measurement with replicates, asked twice"), and a launch-bound step
follows the host. So before measuring, a cell waits until its compile workers have used at most
IDLE_CPUS of a CPU for QUIET_POLLS polls in a row (at once where it has none), up to TIMEOUT_S. It
records the seconds waited (`compile_workers_wait_s`) and the CPUs they kept busy over the measured
window (`compile_workers_cpus`, a part of `node_cpus_busy_other`). Linux (/proc) only: elsewhere
None, and no wait.

A replicate that the local executor starts ahead (workloads/run.py `take_turn`) starts its pool while it
waits for its turn, through the one private inductor API used here, `start_compile_workers`.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from workloads.instruments.base import Instrument

POLL_S = 0.1
#: A worker that sleeps uses no CPU; one that imports or compiles uses a whole one.
IDLE_CPUS = 0.1
QUIET_POLLS = 3
#: Inductor's side process imports torch in 5-10 s on the GPU machines: a worker busy far longer
#: than that is working, not starting, and the cell measures anyway.
TIMEOUT_S = 60.0
_PROC = Path("/proc")
#: Inductor's side process runs torch/_inductor/compile_worker/__main__.py; its workers are forked
#: from it (torch._inductor.compile_worker.subproc_pool, torch 2.11 and 2.15).
WORKER_MARK = b"_inductor/compile_worker/"


def compile_workers_cpu_s(root: int) -> list[float] | None:
    """The CPU seconds (user and system, every thread) that each living compile worker of process
    `root` has used: a descendant whose command line names WORKER_MARK, and that one's descendants;
    None where /proc cannot be read. Other helpers (a DataLoader's workers) are not counted."""
    ticks = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[tuple[int, float]]] = {}
    try:
        entries = [entry for entry in _PROC.iterdir() if entry.name.isdigit()]
    except OSError:
        return None
    for entry in entries:
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # exited since the listing
            continue
        # "pid (comm) state ppid ... utime stime ...": comm may hold spaces and parentheses
        fields = stat.rsplit(")", 1)[1].split()
        cpu_s = (int(fields[11]) + int(fields[12])) / ticks
        children.setdefault(int(fields[1]), []).append((int(entry.name), cpu_s))
    found: list[float] = []
    stack = [(root, False)]
    while stack:
        parent, in_worker = stack.pop()
        for pid, cpu_s in children.get(parent, ()):
            worker = in_worker or WORKER_MARK in _cmdline(pid)
            if worker:
                found.append(cpu_s)
            stack.append((pid, worker))
    return found


def _cmdline(pid: int) -> bytes:
    try:
        return (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return b""


def wait_until_idle(root: int, on_poll: Any = None) -> tuple[float, list[float] | None]:
    """Block until the compile workers of process `root` are idle or gone; the seconds waited, and
    their CPU seconds at the end (`compile_workers_cpu_s`'s last look). `on_poll(cpus)`, where given,
    sees the CPUs they used over each poll."""
    start = last_t = time.monotonic()
    workers = compile_workers_cpu_s(root)
    quiet = 0
    while workers and quiet < QUIET_POLLS and time.monotonic() - start < TIMEOUT_S:
        time.sleep(POLL_S)
        now, now_t = compile_workers_cpu_s(root), time.monotonic()
        if now is not None:
            # an exited helper takes its time along: never a negative use
            cpus = max(0.0, sum(now) - sum(workers)) / (now_t - last_t)
            quiet = quiet + 1 if cpus <= IDLE_CPUS else 0
            if on_poll is not None:
                on_poll(cpus)
        workers, last_t = now, now_t
    return time.monotonic() - start, workers


def start_compile_workers() -> None:
    """Start inductor's compile-worker pool now, as its backend does at its first compile:
    `torch._inductor.async_compile.maybe_warm_pool()` (private: torch has no public way; it is there
    in torch 2.11 and 2.15, and tests/unit/workloads/test_compile_workers.py fails if it goes). A no-op
    where inductor
    would start none (one compile thread, no triton)."""
    from torch._inductor.async_compile import maybe_warm_pool

    maybe_warm_pool()


class CompileWorkersIdle(Instrument):
    """Waits for the cell's compile workers before measuring; their columns (COMPILE_WORKERS_FIELDS)."""

    def __init__(self, root: int | None = None) -> None:
        self._root = os.getpid() if root is None else root  # the cell's process
        self._waited: float | None = None
        self._begin: tuple[float, float] | None = None

    def before_measuring(self) -> None:
        waited, workers = wait_until_idle(self._root)
        if workers is None:  # no /proc: nothing to wait for or to count
            return
        self._waited, self._begin = waited, (sum(workers), time.monotonic())
        if waited >= 1.0:
            print(
                f"compilebench: waited {waited:.1f} s before measuring while inductor's compile "
                "workers started",
                file=sys.stderr,
                flush=True,
            )

    def after_loop(self) -> dict[str, Any]:
        cpus = None
        if self._begin is not None and (workers := compile_workers_cpu_s(self._root)) is not None:
            elapsed = time.monotonic() - self._begin[1]
            cpus = max(0.0, sum(workers) - self._begin[0]) / elapsed if elapsed > 0 else None
        return {"compile_workers_wait_s": self._waited, "compile_workers_cpus": cpus}
