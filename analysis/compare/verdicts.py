"""Each matched cell's verdict, and the host change told from a code change.

With threshold t, a ratio B/A's 95% interval reads

    regression        it lies above 1 + t (B slower by more than t, at 95%)
    improvement       it lies below 1 - t
    within threshold  it lies within [1 - t, 1 + t]
    undecided         otherwise (too noisy to say: more steps or replicates)

The wall step's reading is the cell's verdict, except for a `host change`: the wall step is an
improvement or a regression, while

- the GPU time per step reads `within threshold` (the same margin: the interval excludes every change
  of the GPU's work beyond t) and the launches per step moved by no more than t (fewer launches is a
  change of the code, e.g. CUDA graphs): the work the code gives the GPU held;
- the host probe, measured apart from the steps (host_probe.py), differs between the sweeps beyond its
  noise: its B/A interval excludes 1;
- and the host model fed with the probe ratio explains the step's change in size: the measured step
  ratio is within HOST_MODEL_TOLERANCE of the predicted one.

A step that moved on the same host (the probes within their noise), or by more than the host's
change explains (a guard, a hook or a sync more per step on a slower host), keeps its verdict. A host
change is not counted as an improvement or a regression. Cells without device time keep the wall
step's verdict, said to have `no device time`.
"""

from __future__ import annotations

import numpy as np

from analysis.cells.device_time import DeviceSide
from analysis.compare.host_probe import ProbeRatios
from analysis.compare.ratios import GpuRatios
from analysis.rendering.text import fmt_number

#: The default threshold of a regression (`--threshold`): B slower than A by more than 5%.
THRESHOLD = 0.05
REGRESSION, IMPROVEMENT, WITHIN, UNDECIDED = "regression", "improvement", "within threshold", "undecided"
#: The verdict of a cell whose wall step moved with the host while the GPU's work held.
HOST_CHANGE = "host change"
#: What a moved cell without device time on a side says.
NO_DEVICE_TIME = "no device time"
#: How far the measured step ratio may lie from the host model's (fed with the probe ratio) for the
#: host to explain it: 10%, the accuracy issue 50 asks of the model on a second machine (not yet shown
#: on a GPU: docs/analysis.md). Beyond it the code did more than the host: the step's verdict stands.
HOST_MODEL_TOLERANCE = 0.10


def verdicts(low: np.ndarray, high: np.ndarray, threshold: float) -> np.ndarray:
    """Each ratio interval's reading (module docstring); None where it is unknown."""
    low, high = np.asarray(low, float), np.asarray(high, float)
    verdict = np.full(low.shape, UNDECIDED, dtype=object)
    verdict[(low >= 1 - threshold) & (high <= 1 + threshold)] = WITHIN
    verdict[low > 1 + threshold] = REGRESSION
    verdict[high < 1 - threshold] = IMPROVEMENT
    verdict[np.isnan(low) | np.isnan(high)] = None
    return verdict


def explained(step_ratio: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """Whether the host model's step ratio is the measured one within HOST_MODEL_TOLERANCE (False where
    either is unknown)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        off = np.abs(np.log(np.asarray(step_ratio, float) / np.asarray(predicted, float)))
    return np.nan_to_num(off, nan=np.inf) <= np.log1p(HOST_MODEL_TOLERANCE)


def classify(
    step_verdict: np.ndarray,
    step_ratio: np.ndarray,
    gpu: GpuRatios,
    a: DeviceSide,
    b: DeviceSide,
    probe: ProbeRatios,
    predicted: np.ndarray,
    threshold: float,
) -> tuple[np.ndarray, np.ndarray]:
    """(verdict, the device time's reading) of each matched cell (module docstring); `predicted`: the
    host model's step ratio fed with the probe's."""
    gpu_verdict = verdicts(gpu.low, gpu.high, threshold)
    moved = np.isin(step_verdict, [IMPROVEMENT, REGRESSION])
    launches = b.launches_per_step / a.launches_per_step
    same_launches = np.isnan(launches) | (np.abs(launches - 1) <= threshold)
    held = (gpu_verdict == WITHIN) & same_launches
    host_change = moved & held & probe.beyond_noise & explained(step_ratio, predicted)
    return np.where(host_change, HOST_CHANGE, step_verdict), gpu_verdict


def notes(
    verdict: np.ndarray,
    gpu: GpuRatios,
    a: DeviceSide,
    b: DeviceSide,
    probe: ProbeRatios,
    predicted: np.ndarray,
) -> np.ndarray:
    """What a moved cell's verdict rests on, beside it: the probe and the step the host model predicts
    from it, the µs per launch and the GPU times ('probe 10.5 → 7.6 µs, model 0.727x; 10.5 → 7.6
    µs/launch; GPU time 5.59 → 5.58 ms'), or `no device time`; None for the others."""
    out = np.full(len(verdict), None, dtype=object)
    for i in np.flatnonzero(np.isin(verdict, [IMPROVEMENT, REGRESSION, HOST_CHANGE])):
        if np.isnan(gpu.ratio[i]):
            out[i] = NO_DEVICE_TIME
            continue
        parts = []
        if not np.isnan(probe.ratio[i]):
            model = "" if np.isnan(predicted[i]) else f", model {predicted[i]:.3f}x"
            parts.append(f"probe {probe.a_us[i]:.1f} → {probe.b_us[i]:.1f} µs{model}")
        if not np.isnan(a.us_per_launch[i] * b.us_per_launch[i]):
            parts.append(f"{a.us_per_launch[i]:.1f} → {b.us_per_launch[i]:.1f} µs/launch")
        gpu_ms = a.gpu_ms_per_step[i], b.gpu_ms_per_step[i]
        parts.append(f"GPU time {fmt_number(gpu_ms[0])} → {fmt_number(gpu_ms[1])} ms")
        out[i] = "; ".join(parts)
    return out
