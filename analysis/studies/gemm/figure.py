"""The GEMM figure: µs per GEMM against M (log-log), one line per implementation (cuBLAS, inductor's
choice, the FP8 post's Triton kernels), with the roofline's floors: the memory floor per dtype (bytes /
peak bandwidth at each M) and the compute floor where it binds. A panel per (N, K) and GPU."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import ScalarFormatter

from analysis.rendering.figure_layout import DPI, FIGSIZE
from workloads.contract.vocabulary import BASELINE_BACKEND, COMPLETED, GEMM_KERNELS

NAME = "gemm"
#: The memory floor's line per dtype (others: grey).
FLOOR_COLORS = {"bf16": "black", "fp8": "dimgrey"}
PANEL_INCHES = 4.0
#: A series' line by its backend: cuBLAS solid, the FP8 post's Triton kernels solid with squares, a
#: compiled GEMM dashed.
LINES = {BASELINE_BACKEND: {"linestyle": "-", "marker": "o"}} | {
    kernel: {"linestyle": "-", "marker": "s"} for kernel in GEMM_KERNELS
}
COMPILED = {"linestyle": "--", "marker": "o"}


def gemm_figure(cells: pd.DataFrame) -> Figure:
    """The figure of the GEMM table's rows (analysis/cells/gemm.py `gemm_cells`)."""
    done = cells[cells["status"] == COMPLETED].dropna(subset=["us"])
    panels = list(done.groupby(["gemm_n", "gemm_k", "gpu_name"], dropna=False))
    fig = Figure(
        figsize=(max(FIGSIZE[0], PANEL_INCHES * len(panels)), PANEL_INCHES), dpi=DPI, layout="constrained"
    )
    for ax, ((n, k, gpu), panel) in zip(fig.subplots(1, max(len(panels), 1), squeeze=False)[0], panels):
        # Both timing modes in a panel: a line each, named by its mode.
        timed = panel["gemm_timing"].nunique() > 1
        lines = panel.sort_values("gemm_m").groupby(
            ["implementation", "backend", "gemm_timing"], dropna=False
        )
        for (name, backend, timing), rows in lines:
            ax.errorbar(
                rows["gemm_m"], rows["us"], yerr=[rows["us"] - rows["us_low"], rows["us_high"] - rows["us"]],
                label=f"{name}, {timing}" if timed else name, **LINES.get(backend, COMPILED),
            )  # fmt: skip
        # The memory floor of each dtype: bytes moved / peak bandwidth (µs = bytes / (GB/s * 1e3)).
        for precision, rows in panel.dropna(subset=["gemm_bytes", "peak_gbps"]).groupby("precision"):
            floor = rows.groupby("gemm_m")[["gemm_bytes", "peak_gbps"]].median()
            memory_us = floor["gemm_bytes"] / (floor["peak_gbps"] * 1e3)
            color = FLOOR_COLORS.get(precision, "grey")
            ax.plot(floor.index, memory_us, color=color, linestyle=":", label=f"{precision} memory floor")
        # The compute floor of each dtype where it binds (fp8's peak is twice bf16's: two lines).
        for precision, rows in panel[panel["gemm_bound"] == "compute"].groupby("precision"):
            compute = rows.groupby("gemm_m")["gemm_floor_us"].median()
            color = FLOOR_COLORS.get(precision, "grey")
            ax.plot(compute.index, compute, color=color, linestyle="-.", label=f"{precision} compute floor")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):  # plain numbers: M = 64 and 25 µs read faster than 2^6 and 2.5e1
            axis.set_major_formatter(ScalarFormatter())
        ax.set_xlabel("M")
        ax.set_ylabel("µs per GEMM")
        ax.set_title(f"N = {int(n)}, K = {int(k)}" + ("" if pd.isna(gpu) else f", {gpu}"), fontsize="medium")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="x-small")
    return fig
