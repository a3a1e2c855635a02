"""The device's activity in a profiled window: how long it worked, how many kernels, how many launches.

Busy time is the union of the intervals of the device's activity (kernels, copies, fills), all
streams merged, so two overlapping kernels count once; a window's busy share is that union over the
window's length. The rest is time the GPU idled: waiting for the host to launch
work (a launch-bound step), for data, or for nothing queued at all. Kernel durations are the GPU's
own (CUPTI's timestamps), so busy time is the same on a slower host, where the window's span is not.

A window is bounded by two markers launched on an idle device, one before its work and one after:
device-to-device copies of MARKER_BYTES bytes, a size no model's copy has, so that several windows,
each ended by a synchronize, are told apart in one trace.

A launch is one host call that put work on the device: CUPTI gives every such call a correlation id
and every activity it caused the same id, so the launches are the distinct ids of the activity. A
CUDA graph's replay is one launch however many kernels it holds.

The gaps between kernels (`kernel_gaps`) are the idle stretches between one kernel's end and the next
one's start: within a layer launched kernel by kernel, the host's launch cost the device waited for
(workloads/gemm/layer.py reads them of each window's work, `windows_work`).

Pure arithmetic on (start, end) pairs, and the reading of them from a Chrome trace (what
`torch.profiler` exports): no torch here, so that it is tested on hand-made traces
(tests/unit/workloads/test_device_activity.py).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

#: (start, end) of one interval, in any one unit (the Chrome trace's: µs).
Interval = tuple[float, float]

#: The Chrome-trace categories (`cat`) of work on the device: kineto's names of its activity types
#: (libkineto ActivityType.cpp, unchanged from torch 1.8 to 2.15, where this was checked; old
#: builds wrote "Kernel"). Not `gpu_user_annotation`: a `record_function` range drawn on the GPU's
#: timeline spans the idle gaps between its kernels.
GPU_WORK = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
KERNEL, COPY = "kernel", "gpu_memcpy"
#: The size of a window's marker copies: odd and not a multiple of any dtype's size but a byte's.
MARKER_BYTES = 7919


class Activity(NamedTuple):
    """One piece of the device's work: its interval (µs), whether it is a kernel or a window's marker,
    and the correlation id of the host call that launched it (None where the trace has none). A tuple:
    a trace holds tens of thousands of them."""

    start: float
    end: float
    kernel: bool
    correlation: int | None
    marker: bool = False


@dataclass(frozen=True)
class WindowActivity:
    """What the device did between a window's two markers, the markers left out."""

    busy_ms: float
    """The union of the activity's intervals, ms."""
    span_ms: float
    """From the first marker's start to the last one's end, ms."""
    kernels: int
    launches: int | None
    """None where the trace carries no correlation ids."""

    @property
    def busy_share(self) -> float | None:
        return self.busy_ms / self.span_ms if self.span_ms > 0 else None


def busy_time(intervals: Iterable[Interval], window: Interval) -> float:
    """The length of the union of `intervals`, each clipped to `window` (overlaps count once)."""
    low, high = window
    clipped = sorted((max(start, low), min(end, high)) for start, end in intervals)
    total, reach = 0.0, low
    for start, end in clipped:
        if end > max(start, reach):
            total += end - max(start, reach)
            reach = end
    return total


def device_activity(trace: Mapping[str, Any]) -> list[Activity]:
    """Every complete event of the device's work (GPU_WORK) in a Chrome trace (`{"traceEvents": [...]}`)."""
    activity = []
    for event in trace.get("traceEvents", []):
        cat = str(event.get("cat", "")).lower()
        if cat in GPU_WORK and event.get("ph") == "X" and "dur" in event:
            start, args = float(event["ts"]), event.get("args") or {}
            marker = cat == COPY and _id(args.get("bytes")) == MARKER_BYTES
            end = start + float(event["dur"])
            activity.append(Activity(start, end, cat == KERNEL, _id(args.get("correlation")), marker))
    return activity


def _windows(activity: list[Activity]) -> list[tuple[Interval, list[Activity]]] | None:
    """Each window's bounds (its first marker's start, its second's end) and its work, in order: the
    activity between its two markers (the first and second, the third and fourth, ...), sorted by
    start; None where the markers do not pair up (a window's copies not seen)."""
    markers = sorted((piece for piece in activity if piece.marker), key=lambda piece: piece.start)
    if not markers or len(markers) % 2:
        return None
    work = sorted((piece for piece in activity if not piece.marker), key=lambda piece: piece.start)
    starts = [piece.start for piece in work]  # sorted: a window's work is a slice
    windows = []
    for begin, end in zip(markers[::2], markers[1::2]):
        first, last = bisect_left(starts, begin.start), bisect_right(starts, end.end)
        windows.append(
            ((begin.start, end.end), [piece for piece in work[first:last] if piece.end <= end.end])
        )
    return windows


def windows_work(activity: list[Activity]) -> list[list[Activity]] | None:
    """Each window's work, in order, sorted by start (`_windows`); None where the markers do not pair up."""
    windows = _windows(activity)
    return None if windows is None else [inner for _, inner in windows]


def windows_activity(activity: list[Activity]) -> list[WindowActivity] | None:
    """What the device did in each window (`_windows`), in order; None where the markers do not pair up."""
    windows = _windows(activity)
    if windows is None:
        return None
    summaries = []
    for (start, end), inner in windows:
        correlations = {piece.correlation for piece in inner}
        summaries.append(
            WindowActivity(
                busy_ms=busy_time(((piece.start, piece.end) for piece in inner), (start, end)) / 1e3,
                span_ms=(end - start) / 1e3,
                kernels=sum(piece.kernel for piece in inner),
                launches=None if None in correlations else len(correlations),
            )
        )
    return summaries


def kernel_gaps(intervals: Iterable[Interval]) -> list[float]:
    """The idle time before each interval after the first, the intervals in order of start: its start
    less the furthest end before it (0 where it starts before that: overlapping streams). For the
    kernels of one stream, the gaps between consecutive kernels."""
    gaps, reach = [], None
    for start, end in sorted(intervals):
        if reach is not None:
            gaps.append(max(0.0, start - reach))
        reach = end if reach is None else max(reach, end)
    return gaps


def _id(correlation: object) -> int | None:
    try:
        return int(correlation)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None
