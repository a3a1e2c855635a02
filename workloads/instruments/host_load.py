"""How fast and how free the host was while a cell measured: what a launch-bound step depends on.

A step whose GPU work is short waits on the host: Python, the dispatcher and the kernel launches
of one thread. Its time then follows that thread's speed, which the GPU's provenance does not
show: a virtual machine whose host lends its cores to other guests (steal time), another job's
inductor compile on the same node, a slower CPU. In two runs of the same suite on two machines of
one kind, eager efficientnet_b0's step differed by 30% while GPU-bound resnet50's agreed to 0.5%
(docs/gpu-results.md). So the measured window is bracketed, and these numbers recorded:

- `host_op_us`, `host_op_us_after`: host time per tiny op on the cell's device (an in-place add on
  one element), taken right before measuring and right after: on the CPU the dispatcher's cost every
  eager op pays, on a GPU that and one kernel launch.
- `host_py_us`, `host_py_us_after`: the host probe that no torch touches, µs per 100 iterations of a
  fixed pure-Python loop, before and after measuring: the host's own speed, which a new torch (its
  dispatcher, its guards) cannot move as it moves `host_op_us`. A fixed workload, the same in every
  cell, so that two sweeps' hosts are compared apart from the steps they measured (`compare`:
  docs/analysis.md). Both probes together take a few ms before and a few after
  (`examples/benchmarks/host_probe_noise.py`).
- `node_cpus_busy_other`: how many of the node's CPUs were busy, on average over the window,
  with work other than this process's (other jobs, a neighbour's compile workers).
- `cpu_steal_share`: the share of the node's CPU time the hypervisor gave to other guests over
  the window (0 on bare metal).

All from /proc/stat and the process's own CPU clock; None where there is none (not Linux), never
an exception. Imports with pyarrow alone; torch is imported inside `op_overhead_us`. Before the
window opens, a replicate of the local executor waits for the others to be quiet (`WaitForQuiet`).
"""

from __future__ import annotations

import os
import resource
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

from workloads.instruments.base import Instrument
from workloads.local import turns

#: The tiny ops timed per block, and the blocks (their median is reported): a few ms in all.
OPS_PER_BLOCK, BLOCKS = 200, 5
_PROC_STAT = "/proc/stat"


@dataclass(frozen=True)
class CpuSample:
    """The node's CPU time by kind (seconds, summed over its CPUs), this process's CPU time, the clock."""

    busy_s: float  # user, nice, system, irq, softirq (guest time is inside user and nice)
    steal_s: float
    total_s: float  # busy, idle, iowait and steal
    own_s: float  # this process, every thread
    wall_s: float


def parse_proc_stat(text: str, ticks_per_s: float) -> tuple[float, float, float] | None:
    """(busy, steal, total) seconds of /proc/stat's aggregate "cpu" line, None if it has none."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            user, nice, system, idle, iowait, irq, softirq, steal = (
                int(v) for v in (fields[1:9] + ["0"] * 8)[:8]
            )
            busy = user + nice + system + irq + softirq
            return busy / ticks_per_s, steal / ticks_per_s, (busy + idle + iowait + steal) / ticks_per_s
    return None


def sample() -> CpuSample | None:
    """The node's and this process's CPU time now, None where /proc/stat cannot be read."""
    try:
        with open(_PROC_STAT) as f:
            node = parse_proc_stat(f.read(), os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError):
        return None
    if node is None:
        return None
    own = resource.getrusage(resource.RUSAGE_SELF)
    return CpuSample(*node, own_s=own.ru_utime + own.ru_stime, wall_s=time.monotonic())


def window(begin: CpuSample | None, end: CpuSample | None) -> dict[str, Any]:
    """`node_cpus_busy_other` and `cpu_steal_share` between two samples (None where either is missing
    or no time passed)."""
    values: dict[str, Any] = {"node_cpus_busy_other": None, "cpu_steal_share": None}
    if begin is None or end is None or end.wall_s <= begin.wall_s:
        return values
    other_s = (end.busy_s - begin.busy_s) - (end.own_s - begin.own_s)
    values["node_cpus_busy_other"] = max(0.0, other_s / (end.wall_s - begin.wall_s))  # clock ticks round
    total = end.total_s - begin.total_s
    values["cpu_steal_share"] = (end.steal_s - begin.steal_s) / total if total > 0 else None
    return values


def op_overhead_us(device: Any) -> float | None:
    """Median host µs per in-place add on a one-element tensor of `device`, over BLOCKS blocks of
    OPS_PER_BLOCK (the device is synchronised around each block, so a block waits for nothing
    queued before it); None if it cannot be timed."""
    try:
        import torch

        from workloads.cell.train import synchronize  # imports torch: not at this module's import

        device = torch.device(device)
        x = torch.zeros(1, device=device)
        per_op = []
        for _ in range(BLOCKS):
            synchronize(device)
            start = time.perf_counter()
            for _ in range(OPS_PER_BLOCK):
                x.add_(1.0)
            per_op.append((time.perf_counter() - start) / OPS_PER_BLOCK * 1e6)
        synchronize(device)
        return statistics.median(per_op)
    except Exception:  # noqa: BLE001 - a probe never fails the attempt
        return None


def python_op_us() -> float:
    """Median µs per 100 iterations of a fixed pure-Python loop (a dict store and integer arithmetic),
    over BLOCKS blocks of OPS_PER_BLOCK x 10 iterations: the interpreter's speed on this host."""
    per_100 = []
    for _ in range(BLOCKS):
        table: dict[int, int] = {}
        start = time.perf_counter()
        for i in range(OPS_PER_BLOCK * 10):
            table[i & 63] = i * 3 + 1
        per_100.append((time.perf_counter() - start) / (OPS_PER_BLOCK * 10) * 1e8)
    return statistics.median(per_100)


class HostLoad(Instrument):
    """The measured window: opened right before the measured steps (`before_measuring`), closed
    right after (`after_loop`), which gives every HOST_LOAD_FIELDS column (all None if the window
    never opened: the cell stopped before); the probe after the window's end, so that it is not in
    the window."""

    def __init__(self) -> None:
        self._device: Any = None
        self._begin: CpuSample | None = None
        self._op_us: float | None = None
        self._py_us: float | None = None

    def before_loop(self, cell: Any) -> None:
        self._device = cell.device

    def before_measuring(self) -> None:
        self._op_us = op_overhead_us(self._device)
        self._py_us = python_op_us()
        self._begin = sample()

    def after_loop(self) -> dict[str, Any]:
        load = window(self._begin, sample() if self._begin else None)
        if self._begin is None:
            return {
                "host_op_us": None,
                "host_op_us_after": None,
                "host_py_us": None,
                "host_py_us_after": None,
                **load,
            }
        return {
            "host_op_us": self._op_us,
            "host_op_us_after": op_overhead_us(self._device),
            "host_py_us": self._py_us,
            "host_py_us_after": python_op_us(),
            **load,
        }


class WaitForQuiet(Instrument):
    """Before measuring, wait until no other replicate of the local executor imports or exits
    (workloads/local/turns.py); say so in the log when that took a while."""

    @classmethod
    def for_process(cls) -> Instrument:
        """This instrument in a process of the local executor, which takes turns; else a no-op."""
        return cls() if turns.taking_turns() else Instrument()

    def before_measuring(self) -> None:
        if (waited := turns.wait_for_quiet()) >= 0.1:
            print(
                f"compilebench: waited {waited:.1f} s before measuring while other replicates imported "
                "or exited",
                file=sys.stderr,
                flush=True,
            )
