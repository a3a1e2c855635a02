"""The device's activity (workloads/instruments/device_activity.py, profiled_window.py) on the CPU: the
interval arithmetic against hand computation and a brute-force count, the device's work, kernels and
launches read out of a Chrome trace, the profiled windows' size, which cells profile them, the
columns of each side (the eager side under `force_eager`). A CPU cell's empty columns:
tests/unit/analysis/test_launch_bound.py; on the GPU: tests/gpu/test_gpu_tier.py."""

from __future__ import annotations

import gc
import json
import math
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from workloads.cell.config_io import cell_config_from_dict
from workloads.cell.recorder import CellRecorder
from workloads.contract.schema import PROFILED_WINDOW_FIELDS
from workloads.instruments import profiled_window
from workloads.instruments.base import Instrument
from workloads.instruments.device_activity import (
    MARKER_BYTES,
    WindowActivity,
    busy_time,
    device_activity,
    windows_activity,
)
from workloads.instruments.profiled_window import (
    MIN_STEPS,
    WINDOW_S,
    WINDOWS,
    GpuBusy,
    Window,
    collector_paused,
    window_steps,
)

WINDOW = (0.0, 10.0)


@pytest.mark.parametrize(
    ("intervals", "busy"),
    [
        ([(0, 4), (2, 6)], 6),  # two streams overlapping: the overlap once
        ([(0, 1), (3, 4), (6, 10)], 6),  # gaps between kernels are idle
        ([(1, 9), (2, 3), (4, 5)], 8),  # kernels inside another stream's
        ([(6, 10), (0, 1), (0, 1)], 5),  # unsorted, and the same interval twice
        ([(-5, 2), (8, 15)], 4),  # partly outside the window: clipped to it
        ([(-3, -1), (12, 20), (10, 11)], 0),  # wholly outside, or starting at its end
        ([], 0),
    ],
)
def test_busy_time_by_hand(intervals: list[tuple[float, float]], busy: float) -> None:
    assert busy_time(intervals, WINDOW) == busy


def test_busy_time_against_counting_covered_ticks() -> None:
    """On an integer grid, the union is the number of unit ticks some interval covers."""
    rng = random.Random(0)
    for _ in range(200):
        low, high = rng.randint(0, 20), rng.randint(21, 60)
        starts = [rng.randint(-10, 70) for _ in range(rng.randint(0, 12))]
        intervals = [(s, s + rng.randint(0, 15)) for s in starts]
        covered = sum(any(start <= tick < end for start, end in intervals) for tick in range(low, high))
        assert busy_time(intervals, (low, high)) == covered


def test_an_empty_window_has_no_busy_share() -> None:
    assert WindowActivity(busy_ms=0.0, span_ms=0.0, kernels=0, launches=0).busy_share is None


def trace_event(cat: str, ts: float, dur: float, ph: str = "X", **extra) -> dict:
    return {"ph": ph, "cat": cat, "name": "x", "ts": ts, "dur": dur, "pid": 0, "tid": 7, **extra}


def test_the_device_work_of_a_chrome_trace() -> None:
    """Kernels on any stream, copies and fills count; a record_function range on the GPU's timeline,
    host-side events and metadata do not."""
    trace = {
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
            trace_event("kernel", 100.0, 10.0, tid=7),
            trace_event("kernel", 105.0, 10.0, tid=13),  # another stream, overlapping
            trace_event("Kernel", 130.0, 5.0),  # the name of old builds
            trace_event("gpu_memcpy", 140.0, 2.5),
            trace_event("gpu_memset", 150.0, 1.0),
            trace_event("gpu_user_annotation", 100.0, 51.0),
            trace_event("cpu_op", 90.0, 80.0),
            trace_event("cuda_runtime", 95.0, 2.0),
            trace_event("kernel", 160.0, 0.0, ph="i"),  # not a complete event
        ]
    }
    intervals = [(piece.start, piece.end) for piece in device_activity(trace)]
    assert sorted(intervals) == [(100, 110), (105, 115), (130, 135), (140, 142.5), (150, 151)]
    assert busy_time(intervals, (100, 151)) == pytest.approx(15 + 5 + 2.5 + 1)


def test_a_real_exported_trace_is_read_and_its_host_events_left_out(tmp_path: Path) -> None:
    """torch.profiler's own export: the reader finds its complete events, none of them the device's."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        torch.ones(8, 8).matmul(torch.ones(8, 8))
    profiler.export_chrome_trace(str(tmp_path / "trace.json"))
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert any(event.get("ph") == "X" and event.get("cat") == "cpu_op" for event in trace["traceEvents"])
    assert device_activity(trace) == []


def test_windows_count_launches_and_kernels_between_their_markers() -> None:
    """Marker copies bound each window and are left out; a launch is a correlation id, so a graph's
    replay of three kernels is one launch, and a copy of another size is a launch that runs no kernel."""

    def work(cat: str, ts: float, dur: float, correlation: int, **args) -> dict:
        return trace_event(cat, ts, dur, args={"correlation": correlation, **args})

    def marker(ts: float, correlation: int) -> dict:
        return work("gpu_memcpy", ts, 1.0, correlation, bytes=MARKER_BYTES)

    trace = {
        "traceEvents": [
            marker(0.0, 1),
            work("kernel", 10.0, 5.0, 2),
            work("kernel", 12.0, 6.0, 3),  # another stream, overlapping: busy 10-18
            work("gpu_memcpy", 20.0, 2.0, 4, bytes=4096),
            *(work("kernel", 30.0 + 3 * i, 2.0, 5) for i in range(3)),  # one graph replay
            trace_event("cuda_runtime", 29.0, 1.0, args={"correlation": 5}),  # its host call
            marker(49.0, 6),
            marker(100.0, 7),  # the second window: one kernel
            work("kernel", 110.0, 4.0, 8),
            marker(119.0, 9),
        ]
    }
    first, second = windows_activity(device_activity(trace))
    # kineto writes a trace stream by stream, not in time order: the windows are the same
    assert windows_activity(device_activity({"traceEvents": trace["traceEvents"][::-1]})) == [first, second]
    assert first.kernels == 5 and first.launches == 4
    assert first.busy_ms == pytest.approx((8 + 2 + 6) / 1e3) and first.span_ms == pytest.approx(0.05)
    assert first.busy_share == pytest.approx(16 / 50)
    assert (second.kernels, second.launches, second.span_ms) == (1, 1, pytest.approx(0.02))
    uncorrelated = [marker(0.0, 1), trace_event("kernel", 5.0, 1.0), marker(9.0, 2)]
    assert windows_activity(device_activity({"traceEvents": uncorrelated}))[0].launches is None
    assert windows_activity(device_activity({"traceEvents": trace["traceEvents"][:-1]})) is None  # unpaired
    assert windows_activity(device_activity({"traceEvents": [work("kernel", 1.0, 1.0, 1)]})) is None


def test_a_trace_is_read_with_the_garbage_collector_paused_and_left_as_it_was() -> None:
    for enabled in (True, False):
        (gc.enable if enabled else gc.disable)()
        try:
            with collector_paused():
                assert not gc.isenabled()
            assert gc.isenabled() is enabled
        finally:
            gc.enable()


def test_the_windows_cover_about_window_s_and_each_at_least_min_steps() -> None:
    assert window_steps(None) == window_steps(0.0) == MIN_STEPS
    assert window_steps(WINDOW_S * 1e3) == MIN_STEPS  # one step fills the windows
    short_ms = WINDOW_S * 1e3 / (MIN_STEPS * WINDOWS * 7)
    assert window_steps(short_ms) == math.ceil(WINDOW_S * 1e3 / WINDOWS / short_ms) > MIN_STEPS


def test_only_cuda_cells_of_one_process_profile(tiny_config, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = cell_config_from_dict(tiny_config("gpt", "inductor"))
    assert type(GpuBusy.for_cell(cfg, 1)) is Instrument  # the tiny cell runs on the CPU
    monkeypatch.setattr(profiled_window, "resolve_device", lambda requested: torch.device("cuda"))
    assert type(GpuBusy.for_cell(cfg, 1)) is GpuBusy
    assert type(GpuBusy.for_cell(cfg, 2)) is Instrument


def counted_step() -> tuple[SimpleNamespace, list[int]]:
    """A cell whose step is a compiled function, and the calls its compiled code got: none under
    `force_eager`, which runs the function as it is."""
    calls: list[int] = []

    def backend(gm, example_inputs):
        def compiled(*args):
            calls.append(1)
            return gm.forward(*args)

        return compiled

    add_one = torch.compile(lambda x: x + 1, backend=backend)
    return SimpleNamespace(step=lambda: (add_one(torch.ones(2)), 0.0), device=torch.device("cpu")), calls


def finished(monkeypatch: pytest.MonkeyPatch, paired: bool, window=None) -> dict:
    """GpuBusy's columns after a loop of median step 1 ms, each side's windows replaced by one step
    under its stance: 0.5 ms of GPU time per 1 ms where the compiled code ran, 0.25 where it did not
    (`window`: another replacement)."""
    cell, calls = counted_step()

    def one_step(step, device, steps, windows, stances):
        sides = []
        for stance in stances:
            before = len(calls)
            with stance():
                step()
            gpu_ms = 0.5 if len(calls) > before else 0.25
            sides += [Window(1.0, gpu_ms, 10.0, 12.0 if gpu_ms == 0.5 else 30.0)] * windows
        return sides

    monkeypatch.setattr(profiled_window, "profiled_windows", window or one_step)
    instrument = GpuBusy()
    instrument.before_loop(cell)
    rec = CellRecorder("c", 1)
    rec.run.update(median_step_ms=1.0, paired=paired)
    assert instrument.after_summary(rec) == {}
    return instrument.after_finished()


def test_a_paired_cell_profiles_its_eager_side_under_force_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    columns = finished(monkeypatch, paired=True)
    assert columns["gpu_ms_per_step"] == 0.5 and columns["eager_gpu_ms_per_step"] == 0.25
    assert (
        columns["gpu_ms_windows"] == [0.5] * WINDOWS and columns["eager_gpu_ms_windows"] == [0.25] * WINDOWS
    )
    assert columns["kernels_per_step"] == 12 and columns["eager_kernels_per_step"] == 30
    assert columns["launches_per_step"] == columns["eager_launches_per_step"] == 10
    assert columns["gpu_busy_share"] == 0.5 and columns["eager_gpu_busy_share"] == 0.25
    assert columns["profiled_steps"] == window_steps(1.0) and columns["device_windows"] == WINDOWS
    assert columns["profile_s"] > 0
    assert set(columns) <= {field.name for field in PROFILED_WINDOW_FIELDS}


def test_an_unpaired_cell_has_no_eager_side(monkeypatch: pytest.MonkeyPatch) -> None:
    columns = finished(monkeypatch, paired=False)
    assert columns["gpu_ms_per_step"] == 0.5 and not any(name.startswith("eager_") for name in columns)


def test_no_device_activity_or_a_failure_gives_no_device_time(monkeypatch: pytest.MonkeyPatch) -> None:
    unseen = finished(monkeypatch, paired=True, window=lambda step, device, steps, windows, stances: None)
    assert unseen["gpu_ms_per_step"] is None and unseen["eager_gpu_ms_per_step"] is None
    assert unseen["gpu_busy_share"] is None and unseen["launches_per_step"] is None

    def fails(step, device, steps, windows, stances):
        raise RuntimeError("CUPTI_ERROR_INSUFFICIENT_PRIVILEGES")

    assert finished(monkeypatch, paired=True, window=fails) == {}
