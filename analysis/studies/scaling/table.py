"""Scaling over processes (DDP): throughput and speedup from 1 to N processes, scaling efficiency.

A scaling series is the cells of one workload and backend (analysis.reading.axes.SCALING_WORKLOAD)
at different numbers of processes; its numbers (speedup over the 1-process cell, efficiency,
rank imbalance) are computed per cell in analysis.cells.metrics. Here they become a table, one row per
number of processes of every series that has a multi-process cell; a sweep without such cells
gets no table.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pandas as pd

from analysis.cells.loaded import Loaded
from analysis.reading.axes import (
    DISTRIBUTED_AXES,
    SAME_WORKLOAD,
    backend_labels,
    multi_process,
    scaling_cells,
    workload_labels,
)
from analysis.rendering.text import (
    Table,
    fmt_count,
    fmt_number,
    fmt_percent,
    fmt_percent_interval,
    fmt_speedup,
    is_null,
)
from analysis.studies.base import Study

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: Name of the scaling table (its file stem in report/tables/).
SCALING = "scaling"
#: The per-cell metrics the table's CSV carries, raw.
COLUMNS = [
    "cell_id", *SAME_WORKLOAD, "backend", "compile_mode", "status", "items_per_step", "median_step_ms",
    "items_per_s", "scaling_speedup", "scaling_speedup_low", "scaling_speedup_high", "scaling_efficiency",
    "scaling_efficiency_low", "scaling_efficiency_high", "scaling_baseline_cell_id", "speedup", "speedup_low",
    "speedup_high", "baseline_cell_id", "graph_break_count", "ddp_graph_splits", "rank_imbalance",
]  # fmt: skip


def _layout(world_size: object, nodes: object) -> str:
    """`2 × 1`: processes per node × nodes."""
    if is_null(world_size) or is_null(nodes):
        return ""
    return f"{int(world_size) // int(nodes)} × {int(nodes)}"


def scaling_table(metrics: pd.DataFrame) -> Table:
    """Throughput, speedup over 1 process and scaling efficiency of every scaling series."""
    cells = scaling_cells(metrics)
    settings = [a for a in SAME_WORKLOAD if a not in DISTRIBUTED_AXES]
    text = pd.DataFrame({
        "workload": workload_labels(cells, settings).str.replace("\n", " "),
        "backend": backend_labels(cells),
        "world size": cells["world_size"].map(fmt_count),
        "procs/node × nodes": [_layout(w, n) for w, n in zip(cells["world_size"], cells["nodes"])],
        "status": cells["status"],
        "items/step": cells["items_per_step"].map(fmt_number),
        "median ms": cells["median_step_ms"].map(fmt_number),
        "items/s": cells["items_per_s"].map(fmt_number),
        "speedup vs 1 process [95% CI]": [fmt_speedup(*v) for v in zip(
            cells["scaling_speedup"], cells["scaling_speedup_low"], cells["scaling_speedup_high"])],
        "efficiency [95% CI]": [fmt_percent_interval(*v) for v in zip(
            cells["scaling_efficiency"], cells["scaling_efficiency_low"], cells["scaling_efficiency_high"])],
        "vs eager [95% CI]": [fmt_speedup(*v) for v in zip(cells["speedup"], cells["speedup_low"],
                                                            cells["speedup_high"])],
        "graph breaks": cells["graph_break_count"].map(fmt_count),
        "DDP splits": cells["ddp_graph_splits"].map(fmt_count),
        "rank imbalance": cells["rank_imbalance"].map(lambda value: fmt_percent(value, digits=2)),
    })  # fmt: skip
    note = (
        "Batch and gradient accumulation are per process, so N processes train N times the items per step "
        "(weak scaling); a multi-process step lasts as long as its slowest rank's. Speedup vs 1 process: "
        "items/s over those of the same workload and backend on 1 process, 95% bootstrap interval over both "
        "cells' runs, then their measured steps; efficiency = speedup / processes. vs eager: eager median "
        "step / own median step at the same processes. DDP splits: extra graphs from DDPOptimizer's cuts "
        "at gradient buckets. "
        "Rank imbalance: slowest rank's median step / fastest rank's - 1; the gradient all-reduce makes "
        "ranks wait for each other inside a step, so a slow rank shows as slower steps of all ranks."
    )
    return Table(
        SCALING,
        "Scaling over processes",
        cells[COLUMNS].reset_index(drop=True),
        text.reset_index(drop=True),
        note,
    )


class Scaling(Study):
    """Scaling over processes: the table where the sweep has multi-process cells; the figure of
    every sweep with training cells (it says when there are none)."""

    def tables(self, loaded: Loaded) -> list[Table]:
        return [scaling_table(loaded.training)] if multi_process(loaded.training).any() else []

    def figures(self, loaded: Loaded) -> Iterator[tuple[str, Figure]]:
        from analysis.studies.scaling.figure import NAME, scaling_figure  # matplotlib: only when plotting

        if len(loaded.training):
            yield NAME, scaling_figure(loaded.training, loaded.data.steps)
