"""The energy figure: each cell's joules per step against its step time (log-log), a point per cell
in its backend's colour with both 95% intervals, and lines of constant power (J/step = W x step
time), so that a compiled cell below and left of its eager cell saves both time and energy, and one
that only moves along a line of constant power saves energy by saving time."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.cells.uncertainty import median_intervals
from analysis.reading.axes import backend_labels, workload_labels
from analysis.rendering.figure_layout import figure, log_log, whiskers
from analysis.rendering.palette import backend_colors
from workloads.contract.vocabulary import COMPLETED

NAME = "energy"
#: Watts a line of constant power is drawn for (those the figure's range reaches).
POWER_LINES_W = (10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000)
#: Up to this many cells of several workloads, each point is labelled with its workload.
MAX_LABELS = 20


def energy_figure(metrics: pd.DataFrame, steps: pd.DataFrame) -> Figure:
    """J/step against the median step of every completed cell with a J/step (one at least)."""
    fig, ax = figure("Energy per step against step time, 95% intervals; dotted: constant power")
    cells = metrics[(metrics["status"] == COMPLETED) & metrics["joules_per_step"].notna()]
    cells = cells.reset_index(drop=True)
    ms = cells["median_step_ms"]
    ms_low, ms_high = (pd.Series(end, index=cells.index) for end in median_intervals(cells, steps))
    jps, j_low, j_high = (cells[f"joules_per_step{end}"] for end in ("", "_low", "_high"))
    palette, labels = backend_colors(backend_labels(metrics)), backend_labels(cells)
    for label in sorted(set(labels)):
        mine = (labels == label).to_numpy()
        ax.errorbar(
            ms[mine],
            jps[mine],
            xerr=whiskers(ms[mine], ms_low[mine], ms_high[mine]),
            yerr=whiskers(jps[mine], j_low[mine], j_high[mine]),
            fmt="o",
            color=palette[label],
            label=label,
            capsize=2,
        )
    x_low, x_high = ms_low.fillna(ms).min() / 1.5, ms_high.fillna(ms).max() * 1.5
    y_low, y_high = j_low.fillna(jps).min() / 1.5, j_high.fillna(jps).max() * 1.5
    x = np.geomspace(x_low, x_high, 50)
    for watts in POWER_LINES_W:
        y = watts * x / 1e3
        inside = (y >= y_low) & (y <= y_high)
        if inside.any():
            ax.plot(x, y, color="0.6", linewidth=0.8, linestyle=":", zorder=1)
            ax.text(
                x[inside][-1], y[inside][-1], f"{watts:,} W ", fontsize="x-small", color="0.4", ha="right"
            )
    workloads = workload_labels(cells).str.replace("\n", " ")
    if len(cells) <= MAX_LABELS and workloads.nunique() > 1:
        for x_value, y_value, workload in zip(ms, jps, workloads):
            ax.annotate(
                workload, (x_value, y_value), fontsize="x-small", xytext=(4, 4), textcoords="offset points"
            )
    log_log(ax, (x_low, x_high), (y_low, y_high), "median step (ms)", "GPU energy per step (J)")
    ax.legend(fontsize="small")
    return fig
