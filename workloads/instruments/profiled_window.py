"""Why a cell is fast or slow: short profiled windows after measuring give each side's GPU time per
step and its launches and kernels per step.

Once the loop finished and its row is summarised, the warm cell runs a few more steps per side (a
paired cell's eager side under `force_eager`) in one run under `torch.profiler` with the device's
activity only: for each side one step (the switch of sides in no window), then WINDOWS windows of
about WINDOW_S / WINDOWS seconds of steps at the measured median step (at least MIN_STEPS), the
device idle before and after each. A window's bounds on the GPU's timeline are two marker copies,
launched right before its first step and right after its last one returned: the step boundaries of
the measured loop (workloads/cell/train.py). Within them (workloads/instruments/device_activity.py)
the union of the device's work over the steps is the GPU time per step, which the profiler does not
change (kernel durations are the GPU's), and so are the distinct launches and the kernels per step;
the busy share is that union over the span, which a launch-bound step stretches under the profiler
(`profiled_step_ms` beside the median step says by how much). None of these steps is in
steps.parquet or in the loop's statistics. The host's time per step is the measured loop's own
(workloads/cell/step_timer.py): CUPTI's callbacks would slow it here.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from workloads.cell.config import CellConfig
from workloads.cell.recorder import CellRecorder
from workloads.cell.train import PreparedCell
from workloads.instruments.base import Instrument
from workloads.instruments.device_activity import (
    MARKER_BYTES,
    WindowActivity,
    device_activity,
    windows_activity,
)
from workloads.instruments.environment import resolve_device

#: Seconds of steps a side's windows profile together (at the measured median step), their number,
#: and the fewest steps a window has: three windows give the GPU time an interval within one
#: process. Short, since the profiled steps and their trace are most of what the windows cost, which
#: grows with the launches they hold: on an H100, gpt small inductor's 6 steps a window took 1.4-1.8 s,
#: its 2 steps 0.6 s, their GPU times 0.3% and 0.5% apart (examples/benchmarks/window_cost.py);
#: efficientnetv2_rw_s's 2 steps of 2,370-2,949 launches 3.7-4.5 s, 12-13% of a warm attempt
#: (docs/measurement.md "Device time and the host"). A window of one step still sees all of it.
WINDOW_S, WINDOWS, MIN_STEPS = 0.05, 3, 1


@dataclass(frozen=True)
class Window:
    """One profiled window of a side, per step: its span, the GPU time, the launches (None where the
    trace has no correlation ids) and the kernels."""

    step_ms: float
    gpu_ms: float
    launches: float | None
    kernels: float

    @classmethod
    def of(cls, activity: WindowActivity, steps: int) -> Window:
        launches = None if activity.launches is None else activity.launches / steps
        per_step = activity.span_ms / steps, activity.busy_ms / steps
        return cls(*per_step, launches, activity.kernels / steps)


def window_steps(median_step_ms: float | None) -> int:
    """Steps of one window: WINDOWS of them make about WINDOW_S seconds at this median step, each at
    least MIN_STEPS."""
    if not median_step_ms or median_step_ms <= 0:
        return MIN_STEPS
    return max(MIN_STEPS, math.ceil(WINDOW_S * 1e3 / WINDOWS / median_step_ms))


def device_trace(run: Callable[[], None], device: torch.device) -> dict[str, Any]:
    """The Chrome trace of `run` under torch.profiler, the device's activity only. Public API only
    (`profile`, `export_chrome_trace`; checked on torch 2.15): the trace's categories are kineto's
    names (device_activity.GPU_WORK), which HTA and TensorBoard read too."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profiler:
        run()
        torch.cuda.synchronize(device)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory, "trace.json")
        profiler.export_chrome_trace(str(path))
        return json.loads(path.read_text())


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off, as it was after: the tens of thousands of objects a
    trace is read into set off full collections over a compiled cell's whole heap (on an H100 host the
    first reading of a run's windows took 0.52-0.60 s, later ones 0.05-0.08 s; a trace of 120,000
    kernels beside a heap of 3 million objects, on the CPU: 1.18 s, paused 0.33 s). A trace's objects
    hold no cycles: reference counting frees them."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


#: The sides' context managers, one a side (`force_eager` for a paired cell's eager side).
Stances = Sequence[Callable[[], AbstractContextManager[object]]]


def windows_run(
    step: Callable[[], object], device: torch.device, steps: int, windows: int, stances: Stances
) -> Callable[[], None]:
    """What the profiler records: `windows` windows of `steps` steps under each of `stances` in turn (a
    side each), each bounded by two marker copies, the device idle before and after each."""
    source = torch.zeros(MARKER_BYTES, dtype=torch.uint8, device=device)
    marker = torch.empty_like(source)

    def run() -> None:
        for stance in stances:
            with stance():
                step()  # in no window: a switch of sides (the first eager step after compiled ones)
                torch.cuda.synchronize(device)
                for _ in range(windows):
                    marker.copy_(source)  # a copy of MARKER_BYTES bytes: the window's bound
                    for _ in range(steps):
                        step()
                    marker.copy_(source)
                    torch.cuda.synchronize(device)

    return run


def profiled_windows(
    step: Callable[[], object],
    device: torch.device,
    steps: int,
    windows: int,
    stances: Stances = (contextlib.nullcontext,),
) -> list[Window] | None:
    """The windows of `windows_run`, all in one profiled run, per step; None where the profiler saw no
    activity on the device (CUPTI unavailable, or not allowed)."""
    run = windows_run(step, device, steps, windows, stances)
    torch.cuda.synchronize(device)
    with collector_paused():
        activity = windows_activity(device_activity(device_trace(run, device)))
    count = windows * len(stances)
    if activity is None or len(activity) != count or any(w.busy_share is None for w in activity):
        return None
    return [Window.of(window, steps) for window in activity]


def side_columns(prefix: str, windows: Sequence[Window] | None) -> dict[str, Any]:
    """A side's run-row columns from its windows: medians over the windows, each window's GPU time, the
    busy share and span per step over all of them; None where the profiler saw no device activity."""
    names = ("gpu_busy_share", "profiled_step_ms", "gpu_ms_per_step", "gpu_ms_windows",
             "launches_per_step", "kernels_per_step")  # fmt: skip
    if not windows:
        return {f"{prefix}{name}": None for name in names}
    launches = [window.launches for window in windows]
    return {
        f"{prefix}gpu_busy_share": sum(w.gpu_ms for w in windows) / sum(w.step_ms for w in windows),
        f"{prefix}profiled_step_ms": statistics.mean(w.step_ms for w in windows),
        f"{prefix}gpu_ms_per_step": statistics.median(w.gpu_ms for w in windows),
        f"{prefix}gpu_ms_windows": [w.gpu_ms for w in windows],
        f"{prefix}launches_per_step": None if None in launches else statistics.median(launches),
        f"{prefix}kernels_per_step": statistics.median(w.kernels for w in windows),
    }


class GpuBusy(Instrument):
    """After the loop finished: each side's GPU time, launches and kernels per step (a paired cell's
    eager side too), the windows' size and cost; the window columns None where the profiler saw no
    device activity."""

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
        step, device, steps = self._cell.step, self._cell.device, window_steps(self._median_ms)
        sides = {"": contextlib.nullcontext}
        if self._paired:
            sides["eager_"] = lambda: torch.compiler.set_stance("force_eager")
        columns: dict[str, Any] = {}
        try:
            windows = profiled_windows(step, device, steps, WINDOWS, list(sides.values()))
            for i, prefix in enumerate(sides):
                columns.update(
                    side_columns(prefix, windows[i * WINDOWS : (i + 1) * WINDOWS] if windows else None)
                )
        except Exception as error:  # noqa: BLE001 - a probe after the measuring never fails the attempt
            print(f"compilebench: no profiled window ({type(error).__name__}: {error})", file=sys.stderr)
            return {}
        columns.update(profiled_steps=steps, device_windows=WINDOWS, profile_s=time.perf_counter() - started)
        return columns
