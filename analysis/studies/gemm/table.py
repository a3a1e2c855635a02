"""The GEMM table: one row per shape and implementation, µs per GEMM against the roofline (the rows:
analysis/cells/gemm.py `gemm_cells`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pandas as pd

from analysis.cells.gemm import interval_columns
from analysis.cells.loaded import Loaded
from analysis.rendering.text import Table, fmt_interval, fmt_number, fmt_percent, fmt_speedup, is_null
from analysis.studies.base import Study
from workloads.contract.vocabulary import COMPLETED

if TYPE_CHECKING:
    from matplotlib.figure import Figure

GEMM_TABLE = "gemm"
#: The clock columns of a cell whose clocks were not read: on the CPU, without NVML, in older sweeps.
NOT_MEASURED = "not measured"


def gemm_table(cells: pd.DataFrame) -> Table:
    """The GEMM cells as a table: one row per (M, N, K, implementation)."""
    done = cells["status"] == COMPLETED
    millijoules = cells[interval_columns("joules_per_step")].to_numpy(float) * 1e3
    text = pd.DataFrame({
        "M": cells["gemm_m"].map(_whole), "N": cells["gemm_n"].map(_whole), "K": cells["gemm_k"].map(_whole),
        "implementation": cells["implementation"], "timing": cells["gemm_timing"].fillna(""),
        "µs [95%]": [fmt_interval(*v) if ok else s for v, ok, s in
                     zip(cells[["us", "us_low", "us_high"]].values, done, cells["status"])],
        "TFLOP/s": cells["tflops"].map(fmt_number), "GB/s": cells["gbps"].map(fmt_number),
        "floor µs": cells["gemm_floor_us"].map(fmt_number),
        "of floor": cells["floor_share"].map(lambda v: fmt_percent(v, 0)),
        "bound": cells["gemm_bound"].fillna(""), "kernel": cells["gemm_kernel"].fillna(""),
        "autotune µs": cells["gemm_autotune_us"].map(fmt_number),
        "measured / autotune": cells["autotune_ratio"].map(fmt_speedup),
        "vs bf16 cuBLAS": [fmt_speedup(*v) for v in cells[interval_columns("vs_bf16_cublas")].values],
        "vs fp8 cuBLAS": [fmt_speedup(*v) for v in cells[interval_columns("vs_fp8_cublas")].values],
        "vs base Triton": [fmt_speedup(*v) for v in cells[interval_columns("vs_triton_base")].values],
        "mJ per GEMM": [fmt_interval(*v) for v in millijoules],
        "W": cells["avg_power_w"].map(fmt_number),
        "SM MHz": [NOT_MEASURED if is_null(v) else f"{v:.0f}" for v in cells["sm_clock_mhz"]],
        "clock limits": cells["clock_limits"].fillna(NOT_MEASURED),
        "cell": cells["cell_id"],
    })  # fmt: skip
    if cells["vs_triton_base"].isna().all():  # no base Triton kernel cell: an empty column
        text = text.drop(columns="vs base Triton")
    note = (
        "µs per GEMM: median over the replays (each replay's time / its GEMMs), geometric mean over runs, "
        "with its 95% interval (t over runs; one run: bootstrap of its replays). TFLOP/s = 2MNK / µs; "
        "GB/s = bytes / µs; floor = "
        "max(FLOPs / peak FLOP/s, bytes / peak bandwidth), and `of floor` the floor / measured (100%: at the "
        "roofline). `measured / autotune`: the replay's µs over the autotuner's own timing of its choice "
        "(above 1: the autotuner ranked it faster than it runs). Speedups: the cuBLAS cell's µs at the same "
        "shape and GPU / this one's (fp8: of the same recipe; `vs base Triton`: of the FP8 post's "
        "data-parallel Triton kernel), with the interval of the ratio. mJ per GEMM: "
        "the GPU board's energy over the measured window's GEMMs (NVML's counter), geometric mean over "
        "runs (its "
        "interval from two runs on); W: the window's mean power. timing: `sustained`, seconds of replays "
        "back to back (the clocks a training or serving loop gets under the power cap), or `burst`, the "
        "median of short bursts after idle pauses (as do_bench and profilers time; no energy: its window "
        "is mostly the pauses); speedups are within one timing. SM MHz: NVML's SM clock, the mean of its "
        "samples while the GEMMs ran; clock limits: NVML's clock-limiting reasons seen in any sample "
        "(sw_power_cap: held at the power limit; sw_thermal, hw_thermal: too hot; none: the GPU's own "
        'clocks). docs/gemm.md "Timing modes".'
    )
    return Table(GEMM_TABLE, "GEMMs: µs per GEMM against the roofline", cells, text, note)


def _whole(value: object) -> str:
    return "" if is_null(value) else str(int(value))


class Gemm(Study):
    """The GEMM cells (`model=gemm`): their table and figure, where the sweep has any."""

    def tables(self, loaded: Loaded) -> list[Table]:
        return [gemm_table(loaded.gemm)] if len(loaded.gemm) else []

    def figures(self, loaded: Loaded) -> Iterator[tuple[str, Figure]]:
        from analysis.studies.gemm.figure import NAME, gemm_figure  # matplotlib: only when plotting

        if len(loaded.gemm) and (loaded.gemm["status"] == COMPLETED).any():
            yield NAME, gemm_figure(loaded.gemm)
