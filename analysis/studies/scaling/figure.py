"""The scaling figure: per workload and backend against the processes, scaling efficiency and the
speedup over eager at the same processes, with 95% intervals (the table: table.py)."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from analysis.reading.axes import (
    DISTRIBUTED_AXES,
    SAME_WORKLOAD,
    backend_labels,
    scaling_cells,
    workload_labels,
)
from analysis.rendering.figure_layout import DPI, FIGSIZE, empty, first_workloads, whiskers
from analysis.rendering.palette import backend_colors
from workloads.contract.vocabulary import BASELINE_BACKEND

NAME = "scaling"
#: A marker per workload: the figure shows as many workloads as there are markers.
SCALING_MARKERS = "osD^v<>pPX*h"


def scaling_figure(metrics: pd.DataFrame, steps: pd.DataFrame) -> Figure:
    """Per workload and backend against the processes: scaling efficiency (throughput over N times
    the 1-process cell's) and speedup over eager at the same processes, with 95% intervals."""
    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    efficiency_ax, eager_ax = fig.subplots(1, 2)
    cells = scaling_cells(metrics)
    workloads = workload_labels(cells, [a for a in SAME_WORKLOAD if a not in DISTRIBUTED_AXES]).str.replace(
        "\n", " "
    )
    shown, left_out = first_workloads(workloads, len(SCALING_MARKERS))
    fig.suptitle("Scaling over processes, 95% bootstrap intervals over runs, then steps" + left_out)
    if not shown:
        empty(efficiency_ax, "no multi-process cells")
        eager_ax.set_visible(False)
        return fig
    palette, labels = backend_colors(backend_labels(metrics)), backend_labels(cells)
    processes = cells["world_size"].astype(float)
    markers = dict(zip(shown, SCALING_MARKERS))
    for (workload, label), series in cells.groupby([workloads, labels], sort=False):
        if workload not in markers:
            continue
        x, style = processes[series.index], dict(color=palette[label], marker=markers[workload], capsize=2)
        value, low, high = (100 * series[f"scaling_efficiency{end}"] for end in ("", "_low", "_high"))
        efficiency_ax.errorbar(x, value, yerr=whiskers(value, low, high), **style)
        if label != BASELINE_BACKEND:
            eager_ax.errorbar(
                x,
                series["speedup"],
                yerr=whiskers(series["speedup"], series["speedup_low"], series["speedup_high"]),
                **style,
            )
    ticks = sorted(set(processes.dropna()))
    panels = (
        (efficiency_ax, "Scaling efficiency (100% = linear)", "items/s over N x 1 process (%)", 100.0),
        (eager_ax, "Compiled over eager at the same processes", "speedup over eager", 1.0),
    )
    for ax, title, ylabel, even in panels:
        ax.axhline(even, color="0.3", linewidth=1, linestyle="--")
        ax.set_title(title, fontsize="medium")
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.set_xlabel("processes")
        ax.set_ylabel(ylabel)
    handles = [Line2D([], [], color=palette[label], label=label) for label in sorted(set(labels))]
    handles += [
        Line2D([], [], color="0.3", marker=marker, linestyle="", label=w) for w, marker in markers.items()
    ]
    fig.legend(handles=handles, loc="outside right upper", fontsize="small")
    return fig
