"""The FP8 post's layer (`gemm.layer`): which GEMMs a layer is, and what its profiled windows say.
Torch-free: the arithmetic is tested on made-up intervals (tests/unit/workloads/test_gemm_layer.py).

The post (section 5) times "a simulated Llama3-70B attention layer" launched kernel by kernel and
as one CUDA graph, without naming its GEMMs; the reference (shared/reference/fp8_triton_2024_claims.md)
names none either. Ours is the attention layer's projections in Llama3-70B's dimensions (hidden 8192,
64 query heads and 8 KV heads of 128): x (M x 8192) times q's 8192 x 8192, k's and v's 8192 x 1024,
and the attention's output (M x 8192) times o's 8192 x 8192, one GEMM each, in that order.

A layer's window (workloads/gemm/layer_cell.py) is one layer on an idle device between two marker
copies; of its kernels' intervals:

    span       the first kernel's start to the last one's end (the layer's time on the GPU)
    matmul     the union of the kernels' intervals (device_activity.busy_time)
    idle share 1 - matmul / span: the span's time in which no kernel ran
    gaps       each kernel's start less the previous one's end (device_activity.kernel_gaps)

A way's columns are medians over its windows (the idle share: over all windows' time together), and
the host's time to launch a layer is timed apart, with no profiler (CUPTI slows each launch).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from workloads.gemm.shapes import GemmShape, gemm_bytes, gemm_flops, roofline
from workloads.instruments.device_activity import Interval, busy_time, kernel_gaps

#: Llama3-70B's attention dimensions: hidden size, query heads, KV heads, head size.
HIDDEN, QUERY_HEADS, KV_HEADS, HEAD_DIM = 8192, 64, 8, 128


@dataclass(frozen=True)
class Projection:
    """One GEMM of a layer: x (M x k) times its weight (k x n)."""

    name: str
    n: int
    k: int


#: gemm.layer -> its GEMMs, in the order a layer runs them (workloads/cell/config.py GEMM_LAYERS).
LAYERS: dict[str, tuple[Projection, ...]] = {
    "llama3_70b_attention": (
        Projection("q", QUERY_HEADS * HEAD_DIM, HIDDEN),
        Projection("k", KV_HEADS * HEAD_DIM, HIDDEN),
        Projection("v", KV_HEADS * HEAD_DIM, HIDDEN),
        Projection("o", HIDDEN, QUERY_HEADS * HEAD_DIM),
    ),
}


def layer_shapes(layer: str, m: int) -> list[tuple[str, GemmShape]]:
    """(projection, shape) of each GEMM of `layer` at M = m tokens, in order."""
    return [(p.name, GemmShape(m, p.n, p.k)) for p in LAYERS[layer]]


def layer_columns(
    shapes: Sequence[GemmShape], peak_tflops: float | None, peak_gbps: float | None
) -> dict[str, Any]:
    """The run row's sums over the layer's fp8 (tensorwise) GEMMs: FLOPs, bytes, and its floor, the sum
    of each GEMM's roofline floor (null where a peak is unknown)."""
    floors = [
        roofline(gemm_flops(shape), gemm_bytes(shape, "fp8", "tensorwise"), peak_tflops, peak_gbps)
        for shape in shapes
    ]
    return {
        "flops_per_step": sum(gemm_flops(shape) for shape in shapes),
        "gemm_bytes": sum(gemm_bytes(shape, "fp8", "tensorwise") for shape in shapes),
        "peak_gbps": peak_gbps,
        "gemm_floor_us": None if None in floors else sum(floor.floor_us for floor in floors),  # type: ignore[union-attr]
    }


@dataclass(frozen=True)
class LayerWindow:
    """One profiled layer: its span, its kernels' union and the gaps between them, µs."""

    span_us: float
    matmul_us: float
    gaps_us: list[float]
    kernels: int

    @classmethod
    def of(cls, kernels: Sequence[Interval]) -> LayerWindow | None:
        """From the layer's kernels' (start, end) in µs; None where the window holds no kernel."""
        if not kernels:
            return None
        span = (min(start for start, _ in kernels), max(end for _, end in kernels))
        return cls(span[1] - span[0], busy_time(kernels, span), kernel_gaps(kernels), len(kernels))


def way_columns(way: str, windows: Sequence[LayerWindow], launch_us: Sequence[float]) -> dict[str, Any]:
    """One way's run-row columns (`layer_<way>_*`, workloads/contract/schema.py LAYER_FIELDS) from its
    windows and the host's launch times of a layer; null where there are none."""
    gaps = [gap for window in windows for gap in window.gaps_us]
    span = sum(window.span_us for window in windows)
    values = {
        "us": statistics.median(w.span_us for w in windows) if windows else None,
        "idle_share": 1 - sum(w.matmul_us for w in windows) / span if span > 0 else None,
        "gap_us": statistics.median(gaps) if gaps else None,
        "matmul_us": statistics.median(w.matmul_us for w in windows) if windows else None,
        "launch_us": statistics.median(launch_us) if launch_us else None,
        "kernels": statistics.median(w.kernels for w in windows) if windows else None,
    }
    return {f"layer_{way}_{name}": value for name, value in values.items()}


def graph_speedup(columns: dict[str, Any]) -> float | None:
    """The launched layer's span over the graph's: how much faster one layer is as a CUDA graph."""
    launched, graph = columns.get("layer_launched_us"), columns.get("layer_graph_us")
    return launched / graph if launched and graph else None
