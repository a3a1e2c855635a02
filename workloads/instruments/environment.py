"""Where a cell ran: device and GPU peak throughput, software versions, host and Slurm job; and
the start every run row has (`open_run_row`).

Peaks are the vendors' dense (no sparsity) figures in TFLOP/s; fp16 equals bf16 on these
parts. They are what MFU divides by; `peak_tflops` in the config overrides them.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path

import torch

from workloads.instruments import compile_cache, dynamo_records, provenance

#: (substring of torch.cuda.get_device_name(), {precision column: dense TFLOP/s}); first match wins,
#: so the more specific names come first.
GPU_PEAK_TFLOPS: list[tuple[str, dict[str, float | None]]] = [
    ("H100 PCIe", {"fp8": 1513.0, "bf16": 756.0, "tf32": 378.0, "fp32": 51.2}),
    ("H100", {"fp8": 1978.9, "bf16": 989.4, "tf32": 494.7, "fp32": 66.9}),  # SXM (H100 80GB HBM3)
    ("H200", {"fp8": 1978.9, "bf16": 989.4, "tf32": 494.7, "fp32": 66.9}),
    ("A100", {"fp8": None, "bf16": 312.0, "tf32": 156.0, "fp32": 19.5}),  # no fp8 tensor cores
]
#: (substring of the device name, peak DRAM bandwidth in GB/s), NVIDIA's data sheets; first match wins.
GPU_PEAK_GBPS: list[tuple[str, float]] = [
    ("H100 PCIe", 2000.0),
    ("H100", 3350.0),  # SXM, HBM3
    ("H200", 4800.0),
    ("A100-SXM4-40GB", 1555.0),
    ("A100-PCIE-40GB", 1555.0),
    ("A100", 2039.0),  # 80 GB SXM
]


def peak_tflops(gpu_name: str | None, peak_key: str) -> float | None:
    """Dense peak of `gpu_name` for a precision column, or None for an unknown GPU or the CPU."""
    if not gpu_name:
        return None
    for fragment, peaks in GPU_PEAK_TFLOPS:
        if fragment in gpu_name:
            return peaks[peak_key]
    return None


def peak_gbps(gpu_name: str | None) -> float | None:
    """Peak DRAM bandwidth of `gpu_name` in GB/s, or None for an unknown GPU or the CPU."""
    if not gpu_name:
        return None
    return next((gbps for fragment, gbps in GPU_PEAK_GBPS if fragment in gpu_name), None)


def resolve_device(requested: str) -> torch.device:
    """`auto` picks CUDA when a GPU is visible; asking for `cuda` without one is an error."""
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device=cuda but no CUDA device is visible to this process")
    return torch.device(requested)


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git_sha() -> str | None:
    if os.environ.get("COMPILEBENCH_GIT_SHA"):
        return os.environ["COMPILEBENCH_GIT_SHA"]
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=40", "--exclude=*"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None  # not a git checkout (an installed copy)
    return out.stdout.strip() or None


def describe_environment(device: torch.device) -> dict[str, object]:
    """The run.parquet columns that say where and with what software the cell ran."""
    gpu_name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return {
        "device": str(device),
        "gpu_name": gpu_name,
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "python_prefix": sys.prefix,
        "triton_version": _version("triton"),
        "cuda_version": torch.version.cuda,
        "timm_version": _version("timm"),
        **where_it_runs(),
        "git_sha": _git_sha(),
    }


def where_it_runs() -> dict[str, object]:
    """The host and the Slurm job of this process, from its environment: known before anything is
    built, so that a cell stopped while it starts (the time limit's warning during torch's import)
    still says which job and node it was."""
    return {
        "hostname": socket.gethostname(),
        "slurm_job_id": os.environ.get("SLURM_ARRAY_JOB_ID") or os.environ.get("SLURM_JOB_ID"),
        "slurm_array_task_id": os.environ.get("SLURM_ARRAY_TASK_ID"),
        "partition": os.environ.get("SLURM_JOB_PARTITION"),
    }


def open_run_row(run: dict[str, object], device: torch.device) -> None:
    """What every cell's run row starts with, before anything is built: where it runs, the compile
    cache it uses (chosen before anything compiles: inductor and triton read their directories when
    they first cache) and that cache's state; and the device's peak memory counter reset."""
    run.update(describe_environment(device))
    compile_cache.use(compile_cache.key_inputs(run, provenance.cpu_model()))
    run.update(dynamo_records.cache_state())
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
