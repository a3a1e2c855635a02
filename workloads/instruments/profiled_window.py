"""Why a cell is fast or slow: a short profiled window after measuring gives the GPU's busy share.

Once the loop finished and its row is summarised, the warm cell runs a few more steps: UNPROFILED_STEPS
outside the profiler, then, under `torch.profiler` with the device's activity only, enough steps for
about WINDOW_S seconds at the measured median step (at least MIN_STEPS). The window's bounds on the
GPU's timeline are two one-element adds, launched right before the first step and right after the
last one returned: the step boundaries of the measured loop (workloads/cell/train.py), whose step
time includes the GPU's wait for the host. The busy share is the union of the device's activity
over that span (workloads/instruments/busy_share.py). A paired cell (workloads/cell/paired.py)
runs a second window of its eager side under `force_eager`. None of these steps is in
steps.parquet or in the loop's statistics.

Profiling costs the host time per launch (CUPTI's callbacks; recording CPU ops would cost more,
so they are not recorded): a launch-bound step runs slower in the window than measured, and
`profiled_step_ms` beside the median step says by how much.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from workloads.cell.config import CellConfig
from workloads.cell.recorder import CellRecorder
from workloads.cell.train import PreparedCell
from workloads.instruments.base import Instrument
from workloads.instruments.busy_share import busy_share, gpu_intervals, span
from workloads.instruments.environment import resolve_device

#: Seconds of steps a window profiles (at the measured median step), and the fewest steps: a
#: window of a few steps, short beside the measuring, long beside one step's launch jitter.
WINDOW_S, MIN_STEPS = 0.2, 5
#: Steps run before each window, outside the profiler: the switch to the eager side (its first
#: step after compiled ones) and the profiler's start-up are no part of a window.
UNPROFILED_STEPS = 2


@dataclass(frozen=True)
class Window:
    """One profiled window of a side: the GPU's busy share, the step time over the window."""

    busy_share: float
    step_ms: float


def window_steps(median_step_ms: float | None) -> int:
    """Steps for about WINDOW_S seconds at this median step, at least MIN_STEPS."""
    if not median_step_ms or median_step_ms <= 0:
        return MIN_STEPS
    return max(MIN_STEPS, math.ceil(WINDOW_S * 1e3 / median_step_ms))


def device_trace(run: Callable[[], None], device: torch.device) -> dict[str, Any]:
    """The Chrome trace of `run` under torch.profiler, the device's activity only. Public API only
    (`profile`, `export_chrome_trace`; checked on torch 2.15): the trace's categories are kineto's
    names (busy_share.GPU_WORK), which HTA and TensorBoard read too."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profiler:
        run()
        torch.cuda.synchronize(device)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory, "trace.json")
        profiler.export_chrome_trace(str(path))
        return json.loads(path.read_text())


def profiled_window(step: Callable[[], object], device: torch.device, steps: int) -> Window | None:
    """`steps` steps in a profiled window, after UNPROFILED_STEPS outside it; None where the profiler
    saw no activity on the device (CUPTI unavailable, or not allowed)."""
    for _ in range(UNPROFILED_STEPS):
        step()
    marker = torch.zeros(1, device=device)
    torch.cuda.synchronize(device)

    def window() -> None:
        # The device idles before and after: the first and the last activity are these two adds.
        marker.add_(1)
        for _ in range(steps):
            step()
        marker.add_(1)

    intervals = gpu_intervals(device_trace(window, device))
    bounds = span(intervals)
    share = busy_share(intervals, bounds) if bounds is not None and len(intervals) > 2 else None
    if share is None:
        return None
    return Window(share, (bounds[1] - bounds[0]) / 1e3 / steps)


class GpuBusy(Instrument):
    """After the loop finished: the busy share of the cell's steps on the GPU (and of its eager side
    where it measured paired), the window's size and cost; every column None where the profiler saw
    no device activity."""

    @classmethod
    def for_cell(cls, cfg: CellConfig, world_size: int) -> Instrument:
        """This instrument for a CUDA cell of one process; else a no-op. Not for distributed cells:
        one rank cannot step alone (its backward's all-reduce waits for the others), and in a window
        of all ranks an all-reduce kernel waiting for a slower rank would count as busy."""
        cuda = resolve_device(cfg.device).type == "cuda"
        return cls() if cuda and world_size == 1 else Instrument()

    def __init__(self) -> None:
        self._cell: PreparedCell | None = None
        self._median_ms: float | None = None
        self._paired = False

    def before_loop(self, cell: PreparedCell) -> None:
        self._cell = cell

    def after_summary(self, rec: CellRecorder) -> dict[str, Any]:
        self._median_ms, self._paired = rec.run.get("median_step_ms"), bool(rec.run.get("paired"))
        return {}

    def after_finished(self) -> dict[str, Any]:
        assert self._cell is not None
        started = time.perf_counter()
        steps = window_steps(self._median_ms)
        sides = {"": contextlib.nullcontext}
        if self._paired:
            sides["eager_"] = lambda: torch.compiler.set_stance("force_eager")
        columns: dict[str, Any] = {}
        try:
            for prefix, stance in sides.items():
                with stance():
                    window = profiled_window(self._cell.step, self._cell.device, steps)
                columns[f"{prefix}gpu_busy_share"] = window.busy_share if window else None
                columns[f"{prefix}profiled_step_ms"] = window.step_ms if window else None
        except Exception as error:  # noqa: BLE001 - a probe after the measuring never fails the attempt
            print(f"compilebench: no profiled window ({type(error).__name__}: {error})", file=sys.stderr)
            return {}
        columns.update(profiled_steps=steps, profile_s=time.perf_counter() - started)
        return columns
