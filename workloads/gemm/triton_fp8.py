"""The FP8 post's kernel family in Triton (docs/gemm.md, "The Triton kernels"): one kernel, two
decompositions of C = (A @ B) * scale_a * scale_b with e4m3 A (M x K, row-major) and B (K x N,
column-major), fp32 tensorwise scales and a bf16 C.

- `triton_base` (SPLIT_K = 1): data-parallel, one program per BLOCK_M x BLOCK_N tile of C, the whole
  K loop in it (the post's "base Triton matmul").
- `triton_splitk` (SPLIT_K > 1): SPLIT_K programs per tile, program s taking the K blocks s,
  s + SPLIT_K, ... (the post's TK-GEMM). The partial sums are added atomically into an fp32
  workspace; the program that arrives last at its tile (a per-tile counter) reads the whole sum,
  scales it, writes bf16 and puts the workspace and counter back to zero for the next call. The
  reduction is an fp32 sum of SPLIT_K partials in whatever order they arrive, rounded to bf16 once;
  the post added fp16 partials into its fp16 output instead (SPLIT_K roundings of the output), and
  needed a zeroed output per call (a memset kernel before each GEMM).

Accumulation: on Hopper Triton's fp8 `tl.dot` would sum all of K in the tensor cores' own
accumulator, which keeps about 14 bits (DeepSeek-V3 report, section 3.3); `PROMOTE_EVERY` adds each
32-deep product into the fp32 accumulator instead, as cuBLAS does for `torch._scaled_mm` without
`use_fast_accum` (the cuBLAS cell's setting): the comparison is at equal accumulation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

#: K elements a tensor-core product sums before it is added into the fp32 accumulator (the fp8
#: wgmma's depth); ignored by the interpreter, whose dot is numpy's fp32.
PROMOTE_EVERY = 32
#: Tiles along M grouped per band of programs, so that neighbouring programs share B's columns in L2.
GROUP_M = 8


@dataclass(frozen=True)
class TileConfig:
    """One point of the tuning space (workloads/gemm/triton_tuning.py)."""

    block_m: int
    block_n: int
    block_k: int
    split_k: int
    num_warps: int
    num_stages: int

    @property
    def label(self) -> str:
        """`64x64x512 split4 w8 s3`: what the run row's `gemm_kernel` says after the kernel's name."""
        return (
            f"{self.block_m}x{self.block_n}x{self.block_k} split{self.split_k} "
            f"w{self.num_warps} s{self.num_stages}"
        )


@triton.jit
def _fp8_gemm(
    a_ptr, b_ptr, c_ptr, work_ptr, count_ptr, scale_a_ptr, scale_b_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr, GROUP_M: tl.constexpr, PROMOTE_EVERY: tl.constexpr,
):  # fmt: skip
    # Only builtins (no tl.cdiv, tl.minimum, tl.zeros): those are @triton.jit functions of Triton's
    # library, which the interpreter cannot call where Triton was imported before TRITON_INTERPRET
    # was set (inductor imports it in a test process before tests/unit/workloads/test_triton_fp8.py sets it).
    pid, pid_k = tl.program_id(0), tl.program_id(1)
    grid_m, grid_n = (M + BLOCK_M - 1) // BLOCK_M, (N + BLOCK_N - 1) // BLOCK_N
    band = GROUP_M * grid_n
    first_m = (pid // band) * GROUP_M
    band_m = tl.where(grid_m - first_m < GROUP_M, grid_m - first_m, GROUP_M)
    tile_m = first_m + (pid % band) % band_m
    tile_n = (pid % band) // band_m

    offs_m = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    in_m, in_n = offs_m < M, offs_n < N
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, dtype=tl.float32)
    for step in range(0, (K + BLOCK_K * SPLIT_K - 1) // (BLOCK_K * SPLIT_K)):
        k_left = K - step * BLOCK_K * SPLIT_K  # this program's K blocks: pid_k, pid_k + SPLIT_K, ...
        a = tl.load(a_ptrs, mask=in_m[:, None] & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & in_n[None, :], other=0.0)
        acc = tl.dot(a, b, acc, max_num_imprecise_acc=PROMOTE_EVERY)
        a_ptrs += BLOCK_K * SPLIT_K * stride_ak
        b_ptrs += BLOCK_K * SPLIT_K * stride_bk

    scale = tl.load(scale_a_ptr) * tl.load(scale_b_ptr)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    in_c = in_m[:, None] & in_n[None, :]
    if SPLIT_K == 1:
        tl.store(c_ptrs, (acc * scale).to(tl.bfloat16), mask=in_c)
    else:
        work_ptrs = work_ptr + offs_m[:, None] * N + offs_n[None, :]
        tl.atomic_add(work_ptrs, acc, mask=in_c, sem="relaxed")
        # Every thread's partial is in before the counter says so (the counter's release covers
        # what the barrier ordered before it), and the last program reads after its acquire.
        tl.debug_barrier()
        arrived = tl.atomic_add(count_ptr + pid, 1, sem="acq_rel")
        if arrived == SPLIT_K - 1:
            total = tl.load(work_ptrs, mask=in_c, cache_modifier=".cg")  # from L2, where the atomics are
            tl.store(c_ptrs, (total * scale).to(tl.bfloat16), mask=in_c)
            tl.store(work_ptrs, tl.full((BLOCK_M, BLOCK_N), 0.0, dtype=tl.float32), mask=in_c)
            tl.store(count_ptr + pid, 0)


class Fp8Gemm:
    """The kernel at one tile configuration for fixed operands: `__call__` returns a new bf16 C.
    The SplitK workspace (M x N fp32) and counters are allocated once here and left zero by every
    call, so that a call is one kernel launch (and a CUDA graph can replay it)."""

    def __init__(
        self,
        config: TileConfig,
        a: torch.Tensor,
        b: torch.Tensor,
        scale_a: torch.Tensor,
        scale_b: torch.Tensor,
    ) -> None:
        if a.dtype != torch.float8_e4m3fn or b.dtype != torch.float8_e4m3fn:
            raise ValueError(f"the Triton fp8 GEMM takes e4m3 operands, got {a.dtype} and {b.dtype}")
        if scale_a.numel() != 1 or scale_b.numel() != 1:
            raise ValueError("the Triton fp8 GEMM takes tensorwise scales (one per operand)")
        self.config, self.a, self.b, self.scale_a, self.scale_b = config, a, b, scale_a, scale_b
        (self.m, self.k), self.n = a.shape, b.shape[1]
        tiles = triton.cdiv(self.m, config.block_m) * triton.cdiv(self.n, config.block_n)
        self.grid = (tiles, config.split_k)
        splits = config.split_k > 1
        self.work = torch.zeros((self.m, self.n) if splits else (1,), dtype=torch.float32, device=a.device)
        self.count = torch.zeros(tiles if splits else 1, dtype=torch.int32, device=a.device)

    def __call__(self) -> torch.Tensor:
        cfg, a, b = self.config, self.a, self.b
        c = torch.empty((self.m, self.n), dtype=torch.bfloat16, device=a.device)
        _fp8_gemm[self.grid](
            a, b, c, self.work, self.count, self.scale_a, self.scale_b,
            self.m, self.n, self.k,
            a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
            BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, SPLIT_K=cfg.split_k,
            GROUP_M=GROUP_M, PROMOTE_EVERY=PROMOTE_EVERY,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )  # fmt: skip
        return c
