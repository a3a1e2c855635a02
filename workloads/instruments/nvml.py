"""NVML, the driver's management library (nvidia-ml-py's `pynvml`): its start, shared by the GPU's
provenance (workloads/instruments/provenance.py), its energy (workloads/instruments/gpu_energy.py) and
its clocks (workloads/instruments/gpu_clocks.py); one GPU's board by torch's device, its total-energy
counter and its clocks.

NVML counts its starts: every `start` that returned the library is matched by one `stop`, and the
library closes at the last, so the energy counter, open for the whole loop, and provenance's probes,
each open for a moment, do not close it for each other. Missing pieces are None, never an exception:
no library, no driver (a CPU machine), a GPU NVML does not know, a value it does not support. Imports
without torch (provenance imports with pyarrow alone); torch only inside `open_board`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def value_or_none(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)`, or None where it raised: NVMLError_NotSupported and the like lose that value only."""
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - a probe never fails the attempt
        return None


def start() -> Any | None:
    """The `pynvml` module, started (one more start for NVML to count), or None without the library
    or a driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - not installed, or no driver (NVMLError_LibraryNotFound)
        return None
    return pynvml


def stop(nv: Any) -> None:
    """Match one `start` that returned `nv`."""
    value_or_none(nv.nvmlShutdown)


@contextmanager
def session() -> Iterator[Any | None]:
    """`start` for the `with` block, `stop` after it; the block gets None without NVML."""
    nv = start()
    try:
        yield nv
    finally:
        if nv is not None:
            stop(nv)


def open_board(device: torch.device) -> tuple[Any, Any] | None:
    """(the started `pynvml`, the board's handle) of torch's CUDA device `device`, or None: on the CPU,
    without NVML, or where NVML knows no `GPU-` of its UUID (a MIG instance: its board's readings would
    be every instance's). Torch counts only CUDA_VISIBLE_DEVICES, in its own order, so its index can name
    another GPU to NVML; the UUID names the same board to both. The caller matches the start (`stop`)."""
    if device.type != "cuda":
        return None
    import torch

    uuid = value_or_none(lambda: f"GPU-{torch.cuda.get_device_properties(device).uuid}")
    nv = start() if uuid else None
    if nv is None:
        return None
    handle = value_or_none(nv.nvmlDeviceGetHandleByUUID, uuid)
    if handle is None:
        stop(nv)
        return None
    return nv, handle


class EnergyCounter:
    """One GPU's total-energy counter (`nvmlDeviceGetTotalEnergyConsumption`: mJ since the driver
    loaded, Volta and newer), open from `open` to `close`. The driver updates it every 20-100 ms, so
    only a window of many of those, synchronised at both ends, gives joules worth reading."""

    def __init__(self, nv: Any, handle: Any) -> None:
        self.nv, self.handle = nv, handle
        """The started `pynvml` and the board's handle, for other reads of the same board."""

    @classmethod
    def open(cls, device: torch.device) -> EnergyCounter | None:
        """The counter of torch's CUDA device `device` (`open_board`), or None: where there is no board,
        or where the GPU has no counter (NVMLError_NotSupported before Volta)."""
        board = open_board(device)
        if board is None:
            return None
        counter = cls(*board)
        if counter.read_mj() is None:
            counter.close()
            return None
        return counter

    def read_mj(self) -> int | None:
        """The counter now, mJ; None where NVML failed to read it."""
        return value_or_none(self.nv.nvmlDeviceGetTotalEnergyConsumption, self.handle)

    def close(self) -> None:
        stop(self.nv)


class ClockReader:
    """One GPU's SM clock and its clock-limiting reasons as NVML reports them now, open from `open` to
    `close` (workloads/instruments/gpu_clocks.py samples them)."""

    def __init__(self, nv: Any, handle: Any) -> None:
        self.nv, self.handle = nv, handle
        # NVML 12.2 renamed "throttle reasons" to "clocks event reasons"; older nvidia-ml-py has only
        # the first name. The bits are the same (nvmlClocksEventReason* = nvmlClocksThrottleReason*).
        self._reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )

    @classmethod
    def open(cls, device: torch.device) -> ClockReader | None:
        """The clocks of torch's CUDA device `device` (`open_board`), or None where there is no board."""
        board = open_board(device)
        return None if board is None else cls(*board)

    def read(self) -> tuple[int | None, int | None]:
        """(SM clock in MHz, the reasons' bit mask), each None where NVML failed to read it."""
        mhz = value_or_none(self.nv.nvmlDeviceGetClockInfo, self.handle, self.nv.NVML_CLOCK_SM)
        reasons = value_or_none(self._reasons, self.handle) if self._reasons is not None else None
        return mhz, reasons

    def close(self) -> None:
        stop(self.nv)
