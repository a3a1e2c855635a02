"""The timed GEMM: its operands and the callable that multiplies them, as cuBLAS runs it
(`backend=eager`), as `torch.compile` does with the cell's backend, mode and options, or as one of
the post's Triton kernels does (`gemm.kernel`: workloads/gemm/triton_fp8.py, tuned and checked by
workloads/gemm/triton_tuning.py).

bf16/fp16 call `torch.mm`; fp8 calls `torch._scaled_mm` (private_torch.scaled_mm) with e4m3
operands quantised once, outside the timed call, as an inference GEMM reads weights and activations
already in fp8: B column-major (cuBLAS's fp8 layout), scales per tensor or per row (`precision.recipe`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from workloads.cell.backends import compile_kwargs
from workloads.cell.config import BackendConfig
from workloads.contract.vocabulary import BASELINE_BACKEND
from workloads.gemm.private_torch import scaled_mm
from workloads.gemm.shapes import GemmShape

#: Dtypes of the high-precision GEMMs; fp8's operands are e4m3 with bf16 output.
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
FP8 = torch.float8_e4m3fn


@dataclass
class Gemm:
    """A GEMM ready to call: `call()` multiplies the cell's operands and returns the product."""

    call: Callable[[], torch.Tensor]
    compiled: bool
    name: str | None = None
    """A Triton kernel's name and tile configuration (`triton_splitk 64x64x512 split4 w8 s3`)."""
    tuned_us: float | None = None
    """The tuner's own timing of that kernel (triton.testing.do_bench), µs."""


def _fp8_quantised(x: torch.Tensor, rowwise_dim: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """x in e4m3 and its fp32 dequantising scale: amax over the tensor (rowwise_dim None) or along
    `rowwise_dim` (keepdim: one per row) mapped to e4m3's largest value."""
    amax = x.abs().amax() if rowwise_dim is None else x.abs().amax(dim=rowwise_dim, keepdim=True)
    amax = amax.float().clamp(min=1e-12)
    scale = torch.finfo(FP8).max / amax
    quantised = (x.float() * scale).clamp(-torch.finfo(FP8).max, torch.finfo(FP8).max).to(FP8)
    return quantised, scale.reciprocal()


def make_operands(
    shape: GemmShape, precision: str, recipe: str, device: torch.device, seed: int
) -> tuple[torch.Tensor, ...]:
    """The GEMM's arguments: (A, B) for bf16/fp16, (A, B, scale_a, scale_b) for fp8."""
    generator = torch.Generator(device="cpu").manual_seed(seed)
    a = torch.randn(shape.m, shape.k, generator=generator).to(device)
    b_t = torch.randn(shape.n, shape.k, generator=generator).to(device)  # B stored transposed: column-major
    if precision != "fp8":
        return a.to(DTYPES[precision]), b_t.to(DTYPES[precision]).t()
    rowwise = recipe == "rowwise"
    a8, scale_a = _fp8_quantised(a, 1 if rowwise else None)
    b8_t, scale_b_t = _fp8_quantised(b_t, 1 if rowwise else None)  # per row of B^T = per column of B
    return a8, b8_t.t(), scale_a, scale_b_t.t() if rowwise else scale_b_t


def matmul(precision: str) -> Callable[..., torch.Tensor]:
    """The function the cell times (and compiles): torch.mm, or the scaled fp8 GEMM."""
    return scaled_mm if precision == "fp8" else torch.mm


def build_gemm(
    backend: BackendConfig, precision: str, operands: tuple[torch.Tensor, ...], kernel: str | None = None
) -> Gemm:
    """The GEMM as the backend runs it (a dynamo backend compiles at the first call), or the Triton
    `kernel` at its tuned tile configuration, checked against the reference (KernelMismatch if not)."""
    if kernel is not None:
        from workloads.gemm.triton_tuning import tune  # imports Triton: only cells that run it

        tuned = tune(kernel, *operands)
        return Gemm(tuned.gemm, False, tuned.name, tuned.us)
    fn = matmul(precision)
    compiled = backend.name != BASELINE_BACKEND
    if compiled:
        fn = torch.compile(fn, **compile_kwargs(backend))
    return Gemm(lambda: fn(*operands), compiled)
