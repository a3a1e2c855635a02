"""What a device can run that not every device can: fp8 tensor cores. The orchestrator refuses a cell
before submitting it where the config asks for the CPU or the partition's GPU type is known
(`plan_refusal`, torch-free); a cell that finds itself on such a device anyway raises `NotSupported`,
recorded as `not_supported` (workloads/run.py), never as `failed`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: fp8 (e4m3/e5m2) tensor-core matmuls need compute capability 8.9 (Ada) or 9.0 (Hopper) and later.
FP8_MIN_CAPABILITY = (8, 9)
#: GPU type names (a cluster profile's `partitions` keys, `gpu_name` fragments) -> compute capability.
GPU_CAPABILITY = {
    "V100": (7, 0),
    "T4": (7, 5),
    "A100": (8, 0),
    "A30": (8, 0),
    "A40": (8, 6),
    "A10": (8, 6),
    "L4": (8, 9),
    "L40": (8, 9),
    "H100": (9, 0),
    "H200": (9, 0),
    "GH200": (9, 0),
    "B200": (10, 0),
}


class NotSupported(Exception):
    """The device this cell runs on cannot run what it asks for; the message says what and why."""


def capability_of(gpu_type: str) -> tuple[int, int] | None:
    """The compute capability of a GPU type name (`A100`, `NVIDIA A100-SXM4-80GB`); None if unknown."""
    upper = gpu_type.upper()
    # Longest names first: `GH200` before `H200`, `A100` before `A10`.
    for name in sorted(GPU_CAPABILITY, key=len, reverse=True):
        if name in upper:
            return GPU_CAPABILITY[name]
    return None


def plan_refusal(precision: str, *, device: str = "auto", gpu_type: str | None = None) -> str | None:
    """Why a cell of `precision` cannot run on the config's `device` (auto, cuda, cpu) or on a
    partition of `gpu_type` (one line); None where it can or the type is unknown (then the cell finds
    out where it runs)."""
    if precision != "fp8":
        return None
    if device == "cpu":
        return "precision=fp8 needs a GPU with fp8 tensor cores; this cell asks for device=cpu"
    capability = None if gpu_type is None else capability_of(gpu_type)
    if capability is not None and capability < FP8_MIN_CAPABILITY:
        return (
            f"precision=fp8 needs fp8 tensor cores (compute capability >= 8.9: H100, H200, L4, L40); "
            f"the partition's GPU type {gpu_type} has {capability[0]}.{capability[1]}"
        )
    return None


def require_fp8(device: torch.device) -> None:
    """NotSupported unless `device` is a GPU with fp8 tensor cores."""
    import torch

    if device.type != "cuda":
        raise NotSupported(
            f"precision=fp8 needs a GPU with fp8 tensor cores; this cell runs on the {device.type}"
        )
    capability = torch.cuda.get_device_capability(device)
    if capability < FP8_MIN_CAPABILITY:
        name = torch.cuda.get_device_name(device)
        raise NotSupported(
            f"precision=fp8 needs fp8 tensor cores (compute capability >= 8.9); "
            f"{name} has {capability[0]}.{capability[1]}"
        )
