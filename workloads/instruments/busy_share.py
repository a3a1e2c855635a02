"""The GPU's busy share of a window: how much of it some stream of the device was working.

Busy time is the union of the intervals of the device's activity (kernels, copies, fills), all
streams merged, so two overlapping kernels count once; the share is that union within the window
over the window's length. The rest is time the GPU idled: waiting for the host to launch work
(a launch-bound step), for data, or for nothing queued at all. Pure arithmetic on (start, end)
pairs, and the reading of them from a Chrome trace (what `torch.profiler` exports): no torch
here, so that it is tested on hand-made intervals (tests/test_busy_share.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: (start, end) of one interval, in any one unit (the Chrome trace's: µs).
Interval = tuple[float, float]

#: The Chrome-trace categories (`cat`) of work on the device: kineto's names of its activity types
#: (libkineto ActivityType.cpp, unchanged from torch 1.8 to 2.15, where this was checked; old
#: builds wrote "Kernel"). Not `gpu_user_annotation`: a `record_function` range drawn on the GPU's
#: timeline spans the idle gaps between its kernels.
GPU_WORK = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})


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


def busy_share(intervals: Iterable[Interval], window: Interval) -> float | None:
    """busy_time / the window's length, in [0, 1]; None for an empty window."""
    length = window[1] - window[0]
    return busy_time(intervals, window) / length if length > 0 else None


def span(intervals: Iterable[Interval]) -> Interval | None:
    """From the earliest start to the latest end; None for no intervals."""
    intervals = list(intervals)
    if not intervals:
        return None
    return min(start for start, _ in intervals), max(end for _, end in intervals)


def gpu_intervals(trace: Mapping[str, Any]) -> list[Interval]:
    """The (start, end) µs of every complete event of the device's work (GPU_WORK) in a Chrome trace
    (`{"traceEvents": [...]}`)."""
    return [
        (float(event["ts"]), float(event["ts"]) + float(event["dur"]))
        for event in trace.get("traceEvents", [])
        if str(event.get("cat", "")).lower() in GPU_WORK and event.get("ph") == "X" and "dur" in event
    ]
