"""NVML, the driver's management library (nvidia-ml-py's `pynvml`): its start, shared by the GPU's
provenance (workloads/instruments/provenance.py) and its energy (workloads/instruments/gpu_energy.py),
and one GPU's total-energy counter.

NVML counts its starts: every `start` that returned the library is matched by one `stop`, and the
library closes at the last, so the energy counter, open for the whole loop, and provenance's probes,
each open for a moment, do not close it for each other. Missing pieces are None, never an exception:
no library, no driver (a CPU machine), a GPU NVML does not know, a value it does not support. Imports
without torch (provenance imports with pyarrow alone); torch only inside `EnergyCounter.open`.
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


class EnergyCounter:
    """One GPU's total-energy counter (`nvmlDeviceGetTotalEnergyConsumption`: mJ since the driver
    loaded, Volta and newer), open from `open` to `close`. The driver updates it every 20-100 ms, so
    only a window of many of those, synchronised at both ends, gives joules worth reading."""

    def __init__(self, nv: Any, handle: Any) -> None:
        self.nv, self.handle = nv, handle
        """The started `pynvml` and the board's handle, for other reads of the same board."""

    @classmethod
    def open(cls, device: torch.device) -> EnergyCounter | None:
        """The counter of torch's CUDA device `device`, or None: on the CPU, without NVML, where NVML
        knows no `GPU-` of that UUID (a MIG instance: its board's energy would be every instance's),
        or where the GPU has no counter (NVMLError_NotSupported before Volta).
        Torch counts only CUDA_VISIBLE_DEVICES, in its own order, so its index can name another GPU to
        NVML; the UUID names the same board to both."""
        if device.type != "cuda":
            return None
        import torch

        uuid = value_or_none(lambda: f"GPU-{torch.cuda.get_device_properties(device).uuid}")
        nv = start() if uuid else None
        if nv is None:
            return None
        counter = cls(nv, value_or_none(nv.nvmlDeviceGetHandleByUUID, uuid))
        if counter.handle is None or counter.read_mj() is None:
            counter.close()
            return None
        return counter

    def read_mj(self) -> int | None:
        """The counter now, mJ; None where NVML failed to read it."""
        return value_or_none(self.nv.nvmlDeviceGetTotalEnergyConsumption, self.handle)

    def close(self) -> None:
        stop(self.nv)
