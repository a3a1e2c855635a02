"""The GPU's clocks while a GEMM cell's GEMMs run (docs/gemm.md "Timing modes"): NVML's SM clock and
its clock-limiting reasons (workloads/instruments/nvml.py `ClockReader`), sampled in the measured window
(from `before_measuring` to the loop's end) only at moments when GEMMs are queued on the GPU: the cell
calls `sample` right after it queues a replay (sustained: at most every CLOCK_SAMPLE_GAP_S) or in the
middle of a burst (workloads/gemm/bursts.py). An idle moment would record the idle GPU's clock, which
no GEMM ran at.

Run columns: `sm_clock_mhz` (the samples' mean), `clock_samples`, `clock_limits` (every reason seen in
any sample, by name, or `none`). Null on the CPU, without NVML, or where no sample was read: not
measured, never a failure.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from workloads.contract.vocabulary import NO_CLOCK_LIMITS
from workloads.instruments.base import Instrument
from workloads.instruments.nvml import ClockReader

#: NVML's clock-limiting reason bits (nvml.h nvmlClocksEventReason*, the older nvmlClocksThrottleReason*:
#: the same bits) by the name `clock_limits` gives them. sw_power_cap: the driver holds the board at its
#: power limit; hw_power_brake: an external power brake; sw_thermal / hw_thermal: the GPU or its memory
#: too hot; gpu_idle: nothing ran; applications_clocks / display_clocks / sync_boost: clocks set by
#: the user, the display or a sync-boost group; board_limit, reliability: the board's own limits.
CLOCK_LIMITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
    0x200: "board_limit",
    0x400: "reliability",
}
#: The least time between two samples of a sustained cell, s. A sample is two NVML calls made while
#: the host is HOST_LEAD_STEPS replays ahead of the GPU (workloads/cell/train.py), so its cost is no
#: wait of the GPU's; at one a 10 ms a 5 s window still gets ~500 samples, and a sample lands on a
#: small GEMM's replay at most once in many.
CLOCK_SAMPLE_GAP_S = 0.01


def limit_names(mask: int) -> str:
    """The reasons of NVML's bit mask by name, comma-joined in bit order (`sw_power_cap,sw_thermal`);
    `none` for none; a bit this table does not know as its hex value."""
    names = [CLOCK_LIMITS.get(1 << bit, hex(1 << bit)) for bit in range(mask.bit_length()) if mask >> bit & 1]
    return ",".join(names) or NO_CLOCK_LIMITS


def clock_columns(mhz: list[int], masks: list[int]) -> dict[str, Any]:
    """The run columns of the samples read: the mean SM clock over those that read one, how many, and
    the reasons of any of them (OR-ed); null where none was read."""
    combined = 0
    for mask in masks:
        combined |= mask
    return {
        "sm_clock_mhz": statistics.fmean(mhz) if mhz else None,
        "clock_samples": len(mhz) if mhz else None,
        "clock_limits": limit_names(combined) if masks else None,
    }


class GpuClocks(Instrument):
    """Samples this cell's GPU's clocks when its loop calls `sample`, in the measured window only."""

    def __init__(self, device: torch.device) -> None:
        self._device, self._gap_s = device, CLOCK_SAMPLE_GAP_S
        self._reader: ClockReader | None = None
        self._open = False
        self._last = -float("inf")
        self._mhz: list[int] = []
        self._masks: list[int] = []

    def before_build(self) -> None:
        # NVML starts here, not when measuring begins: its start (the driver's handles) is no moment
        # of the window's.
        self._reader = ClockReader.open(self._device)

    def before_measuring(self) -> None:
        self._open = self._reader is not None

    def sample(self) -> None:
        """One reading, where the window is open and the last was at least the gap ago."""
        if not self._open:
            return
        now = time.perf_counter()
        if now - self._last < self._gap_s:
            return
        self._last = now
        assert self._reader is not None
        mhz, mask = self._reader.read()
        if mhz is not None:
            self._mhz.append(mhz)
        if mask is not None:
            self._masks.append(mask)

    def after_loop(self) -> dict[str, Any]:
        self._open = False
        if self._reader is None:
            return {}
        self._reader.close()
        self._reader = None
        return clock_columns(self._mhz, self._masks)
