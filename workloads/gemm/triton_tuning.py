"""Which tile configuration a Triton fp8 GEMM cell times: the fastest of a small stated space, timed at
the cell's own operands on its GPU, each candidate checked against the reference first
(workloads/gemm/kernel_check.py). On the CPU (Triton's interpreter) nothing is timed: the space's
first point runs, checked as on a GPU.

The space is made for the post's shapes (N = K = 8192, M = 1..64; docs/gemm.md): its first SplitK
point is the post's own choice (TK-GEMM: 64x64x512 tiles, SPLIT_K = 4, 8 warps, 3 stages), the
others vary SPLIT_K (2, 8), the tile's width (32, 128) and the K step (256, with 4 stages). The
base kernel's space is four of the fp8 points of Triton's matmul tutorial (its 256-row tiles left
out: at M <= 64 three quarters of their rows would be padding) and two narrower tiles, 64 x 64 and
64 x 32: at M <= 64 they give 128 and 256 programs for an H100's 132 SMs, the tutorial's 32 to 128.
Every tile has 64 rows or more: Triton then uses Hopper's wgmma, whose accumulation `PROMOTE_EVERY`
controls (triton_fp8.py); for 16- or 32-row tiles it uses mma.sync, where it does not, and the
check's bound would not hold for certain. Compiled for sm_90 with Triton 3.8 (2026-11-28, no GPU:
triton.compile to a cubin), all 14 points are wgmma with that promotion, pipelined in 48 to 192 KiB
of shared memory (an H100 block has 227 KiB). The rows beyond M are masked, never read from memory:
at M = 16 a 64-row tile costs tensor-core work, not bandwidth. 8 + 6 candidates, a few seconds of
Triton compilation each: a cell tunes in about a minute.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workloads.gemm.kernel_check import ProductCheck
from workloads.gemm.triton_fp8 import Fp8Gemm, TileConfig

#: gemm.kernel -> its candidates (block_m, block_n, block_k, split_k, num_warps, num_stages).
SPACE: dict[str, tuple[TileConfig, ...]] = {
    "triton_splitk": (
        TileConfig(64, 64, 512, 4, 8, 3),  # the post's TK-GEMM
        TileConfig(64, 64, 512, 2, 8, 3),
        TileConfig(64, 64, 512, 8, 8, 3),
        TileConfig(64, 32, 512, 4, 4, 3),
        TileConfig(64, 128, 512, 2, 8, 2),  # 3 stages would need 288 KiB of shared memory
        TileConfig(64, 64, 256, 4, 4, 4),
        TileConfig(64, 64, 256, 8, 4, 4),
        TileConfig(64, 128, 256, 4, 8, 4),
    ),
    "triton_base": (
        TileConfig(64, 256, 128, 1, 4, 4),  # this and the next three: the matmul tutorial's fp8 points
        TileConfig(128, 128, 128, 1, 4, 4),
        TileConfig(64, 128, 64, 1, 4, 4),
        TileConfig(128, 64, 64, 1, 4, 4),
        TileConfig(64, 64, 128, 1, 4, 4),
        TileConfig(64, 32, 256, 1, 4, 4),
    ),
}
#: triton.testing.do_bench's warm-up and measuring budget per candidate, ms (it empties L2 between
#: calls; at N = K = 8192 the 64 MiB fp8 B would not fit in it anyway).
WARMUP_MS, REP_MS = 25, 100


@dataclass
class Tuned:
    """The chosen kernel, ready to call, and what choosing it saw."""

    gemm: Fp8Gemm
    name: str
    """`triton_splitk 64x64x512 split4 w8 s3`: the run row's `gemm_kernel`."""
    us: float | None
    """do_bench's median of the chosen one, µs (None: not timed, on the CPU)."""
    timed: int
    """Candidates timed (those that compiled for this GPU)."""
    worst_check: float
    """The largest |c - r| / bound any candidate's product reached (kernel_check.py; < 1)."""


def _compiles(gemm: Fp8Gemm) -> torch.Tensor | None:
    """The first product of a candidate, or None where it does not fit the GPU (shared memory,
    registers: Triton's OutOfResources)."""
    from triton.runtime.errors import OutOfResources

    try:
        return gemm()
    except OutOfResources:
        return None


def tune(
    kernel: str, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor
) -> Tuned:
    """The fastest checked candidate of `kernel`'s space at these operands (module docstring);
    KernelMismatch (from the check) where any candidate's product is wrong."""
    space, check = SPACE[kernel], ProductCheck(a, b, scale_a, scale_b)
    if a.device.type != "cuda":
        gemm = Fp8Gemm(space[0], a, b, scale_a, scale_b)
        name = f"{kernel} {space[0].label}"
        return Tuned(gemm, name, None, 0, check(name, gemm()))

    from triton.testing import do_bench

    timings: list[tuple[float, Fp8Gemm]] = []
    worst = 0.0
    for config in space:
        gemm = Fp8Gemm(config, a, b, scale_a, scale_b)
        product = _compiles(gemm)
        if product is None:
            continue
        # Twice: the second call starts from the workspace the first left, which must be zero.
        worst = max(worst, check(f"{kernel} {config.label}", product))
        worst = max(worst, check(f"{kernel} {config.label} (second call)", gemm()))
        timings.append((do_bench(gemm, warmup=WARMUP_MS, rep=REP_MS) * 1e3, gemm))
    if not timings:
        raise RuntimeError(f"{kernel}: no candidate of its space fits this GPU")
    us, best = min(timings, key=lambda timed: timed[0])
    return Tuned(best, f"{kernel} {best.config.label}", us, len(timings), worst)
