"""A GEMM cell's shape and its arithmetic: FLOPs, bytes moved, the roofline floor. Torch-free.

For A (M x K) times B (K x N) into C (M x N):

    flops       = 2 * M * N * K                       (one multiply and one add per term)
    bytes       = M*K*a + K*N*b + M*N*c + scale bytes (each operand read once, C written once;
                                                       a, b, c the bytes per element)
    floor_s     = max(flops / peak FLOP/s, bytes / peak bytes/s)   (the roofline bound)
    bound       = "memory" where the bytes' term is the larger, else "compute"

fp8 operands are e4m3 (1 byte) with a bf16 (2-byte) output, and fp32 scales: one per operand
(tensorwise) or M + N of them (rowwise: one per row of A, one per column of B).
"""

from __future__ import annotations

from dataclasses import dataclass

#: The size presets (M, N, K). tiny runs on a CPU in tests; small is the FP8 post's Llama3-70B
#: attention shape (M = 16 tokens, N = K = 8192), the others grow M to where the GEMM turns compute-bound.
GEMM_SIZES: dict[str, tuple[int, int, int]] = {
    "tiny": (64, 64, 64),
    "small": (16, 8192, 8192),
    "medium": (256, 8192, 8192),
    "large": (2048, 8192, 8192),
    "xl": (8192, 8192, 8192),
}
#: Bytes per element of the operands and of the output, by precision.
OPERAND_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}
OUTPUT_BYTES = {"bf16": 2, "fp16": 2, "fp8": 2}  # fp8 GEMMs write bf16
SCALE_BYTES = 4  # fp32


@dataclass(frozen=True)
class GemmShape:
    m: int
    n: int
    k: int


def resolve_shape(size: str, m: int | None, n: int | None, k: int | None) -> GemmShape:
    """The cell's shape: each of gemm.m, gemm.n, gemm.k, or the size preset's where null."""
    preset = GEMM_SIZES[size]
    return GemmShape(*(given if given is not None else default for given, default in zip((m, n, k), preset)))


def gemm_flops(shape: GemmShape) -> float:
    return 2.0 * shape.m * shape.n * shape.k


def scale_count(shape: GemmShape, precision: str, recipe: str) -> int:
    """fp32 scales the fp8 GEMM reads: 2 tensorwise, M + N rowwise; none for bf16/fp16."""
    if precision != "fp8":
        return 0
    return 2 if recipe == "tensorwise" else shape.m + shape.n


def gemm_bytes(shape: GemmShape, precision: str, recipe: str) -> int:
    """Bytes moved at the least: each operand read once, the output written once, the scales read."""
    a = b = OPERAND_BYTES[precision]
    out = OUTPUT_BYTES[precision]
    return (
        shape.m * shape.k * a
        + shape.k * shape.n * b
        + shape.m * shape.n * out
        + scale_count(shape, precision, recipe) * SCALE_BYTES
    )


@dataclass(frozen=True)
class Roofline:
    floor_us: float
    """The least time the GEMM can take on the device: the larger of its two terms."""
    bound: str
    """`memory` or `compute`: which term is the larger."""


def roofline(
    flops: float, nbytes: int, peak_tflops: float | None, peak_gbps: float | None
) -> Roofline | None:
    """The roofline bound of a GEMM; None where either peak is unknown (the CPU, an unlisted GPU)."""
    if not peak_tflops or not peak_gbps:
        return None
    compute_us = flops / (peak_tflops * 1e12) * 1e6
    memory_us = nbytes / (peak_gbps * 1e9) * 1e6
    return Roofline(max(compute_us, memory_us), "memory" if memory_us > compute_us else "compute")


def gemm_columns(
    shape: GemmShape,
    precision: str,
    recipe: str,
    median_step_ms: float | None,
    peak_tflops: float | None,
    peak_gbps: float | None,
) -> dict[str, object]:
    """The run row's gemm_* columns from the median time of one GEMM (None: nothing measured)."""
    flops, nbytes = gemm_flops(shape), gemm_bytes(shape, precision, recipe)
    bound = roofline(flops, nbytes, peak_tflops, peak_gbps)
    seconds = median_step_ms / 1e3 if median_step_ms else None
    us = seconds * 1e6 if seconds else None
    return {
        "gemm_us": us,
        "gemm_tflops": flops / seconds / 1e12 if seconds else None,
        "gemm_bytes": nbytes,
        "gemm_gbps": nbytes / seconds / 1e9 if seconds else None,
        "peak_gbps": peak_gbps,
        "gemm_floor_us": bound.floor_us if bound else None,
        "gemm_roofline_share": bound.floor_us / us if bound and us else None,
        "gemm_bound": bound.bound if bound else None,
    }
