"""Each matched cell's verdict, and the host change told from a code change.

With threshold t, a ratio B/A's 95% interval reads

    regression        it lies above 1 + t (B slower by more than t, at 95%)
    improvement       it lies below 1 - t
    within threshold  it lies within [1 - t, 1 + t]
    undecided         otherwise (too noisy to say: more steps or replicates)

The wall step's reading is the cell's verdict, except for a `host change`: the wall step is an
improvement or a regression while the GPU time per step reads `within threshold` (the same margin:
the interval excludes every change of the GPU's work beyond t), the launches per step moved by no
more than t (fewer launches is a change of the code, e.g. CUDA graphs) and the host's speed moved the
same way as the step (its µs per launch, or its host_op_us where launches were not counted). The
step moved and the work on the GPU did not: the host did it. A host change is not counted as an
improvement or a regression; a GPU time beyond the margin, or one too noisy to say, leaves the wall
step's verdict. Cells without device time keep the wall step's verdict, said to have `no device time`.
"""

from __future__ import annotations

import numpy as np

from analysis.cells.device_time import DeviceSide
from analysis.compare.ratios import GpuRatios
from analysis.rendering.text import fmt_number

#: The default threshold of a regression (`--threshold`): B slower than A by more than 5%.
THRESHOLD = 0.05
REGRESSION, IMPROVEMENT, WITHIN, UNDECIDED = "regression", "improvement", "within threshold", "undecided"
#: The verdict of a cell whose wall step moved with the host while the GPU's work held.
HOST_CHANGE = "host change"
#: What a moved cell without device time on a side says.
NO_DEVICE_TIME = "no device time"


def verdicts(low: np.ndarray, high: np.ndarray, threshold: float) -> np.ndarray:
    """Each ratio interval's reading (module docstring); None where it is unknown."""
    low, high = np.asarray(low, float), np.asarray(high, float)
    verdict = np.full(low.shape, UNDECIDED, dtype=object)
    verdict[(low >= 1 - threshold) & (high <= 1 + threshold)] = WITHIN
    verdict[low > 1 + threshold] = REGRESSION
    verdict[high < 1 - threshold] = IMPROVEMENT
    verdict[np.isnan(low) | np.isnan(high)] = None
    return verdict


def host_ratios(a: DeviceSide, b: DeviceSide) -> tuple[np.ndarray, np.ndarray]:
    """(B/A of the host's speed, 'µs/launch' or 'µs/op' per cell): µs per launch where both sides
    counted launches, else host_op_us; NaN where neither is known on both sides."""
    per_launch = b.us_per_launch / a.us_per_launch
    per_op = b.host_op_us / a.host_op_us
    launched = ~np.isnan(per_launch)
    return np.where(launched, per_launch, per_op), np.where(launched, "µs/launch", "µs/op")


def classify(
    step_verdict: np.ndarray,
    step_ratio: np.ndarray,
    gpu: GpuRatios,
    a: DeviceSide,
    b: DeviceSide,
    threshold: float,
) -> tuple[np.ndarray, np.ndarray]:
    """(verdict, the device time's reading) of each matched cell (module docstring)."""
    gpu_verdict = verdicts(gpu.low, gpu.high, threshold)
    moved = np.isin(step_verdict, [IMPROVEMENT, REGRESSION])
    launches = b.launches_per_step / a.launches_per_step
    same_launches = np.isnan(launches) | (np.abs(launches - 1) <= threshold)
    host, _ = host_ratios(a, b)
    with_host = np.sign(np.log(host)) == np.sign(np.log(step_ratio))  # NaN: never the same sign
    host_change = moved & (gpu_verdict == WITHIN) & same_launches & with_host
    return np.where(host_change, HOST_CHANGE, step_verdict), gpu_verdict


def notes(verdict: np.ndarray, gpu: GpuRatios, a: DeviceSide, b: DeviceSide) -> np.ndarray:
    """What a moved cell's verdict rests on, beside it: both hosts' speed and both GPU times
    ('10.5 → 9.6 µs/launch, GPU time 5.59 → 5.58 ms'), or `no device time`; None for the others."""
    host, unit = host_ratios(a, b)
    a_host = np.where(unit == "µs/launch", a.us_per_launch, a.host_op_us)
    b_host = np.where(unit == "µs/launch", b.us_per_launch, b.host_op_us)
    out = np.full(len(verdict), None, dtype=object)
    for i in np.flatnonzero(np.isin(verdict, [IMPROVEMENT, REGRESSION, HOST_CHANGE])):
        if np.isnan(gpu.ratio[i]):
            out[i] = NO_DEVICE_TIME
            continue
        speed = "" if np.isnan(host[i]) else f"{a_host[i]:.1f} → {b_host[i]:.1f} {unit[i]}, "
        gpu_ms = a.gpu_ms_per_step[i], b.gpu_ms_per_step[i]
        out[i] = f"{speed}GPU time {fmt_number(gpu_ms[0])} → {fmt_number(gpu_ms[1])} ms"
    return out
