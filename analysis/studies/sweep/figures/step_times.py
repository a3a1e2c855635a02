"""Step time over steps: a panel per workload, a line per replicate of each of its cells."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from analysis.reading.axes import (
    backend_labels,
    workload_labels,
)
from analysis.reading.collect import REPEAT
from analysis.rendering.figure_layout import (
    DPI,
    FIGSIZE,
    LABEL_SIZE,
    empty,
    first_workloads,
    plain_log_axis,
)
from analysis.rendering.palette import backend_colors
from analysis.rendering.text import fmt_number
from analysis.studies.sweep.figures.rows import PAIRED_EAGER
from workloads.contract.vocabulary import COMPLETED

#: Workloads a figure of panels shows (the title counts the others; the tables have every cell).
MAX_PANELS = 24
PANEL_COLUMNS, PANEL_INCHES = 3, 2.4
#: Diamonds along the measured steps that draw a side's GPU time per step.
GPU_MARKS = 9
#: The legend's entries of a paired cell's eager side and of the GPU time per step, after the backends'.
SIDE_LEGEND = {
    "~eager side": {"linestyle": "--", "label": f"{PAIRED_EAGER}: its measured step"},
    "~gpu": {"marker": "d", "ms": 4, "linestyle": "", "label": "GPU time per step"},
    "~gpu eager side": {
        "marker": "d",
        "ms": 4,
        "mfc": "white",
        "linestyle": "",
        "label": "… of the paired eager side",
    },
}


def _levels(cell: pd.Series) -> list[float]:
    """The step times a cell draws as levels: its paired eager side's step, and each side's GPU time."""
    return [v for v in (cell["eager_step_ms"], cell["gpu_ms"], cell["eager_gpu_ms"]) if pd.notna(v)]


def _draw_levels(ax, cell: pd.Series, measured: pd.Series, color: str, legend: dict) -> None:
    """Across a cell's measured steps: its paired eager side's measured step (dashed), and the GPU time
    per step of its own steps (filled diamonds) and of that eager side (hollow ones)."""
    if measured.empty:
        return
    x = np.linspace(measured.min(), measured.max(), GPU_MARKS)
    if pd.notna(cell["eager_step_ms"]):
        ax.plot(x[[0, -1]], [cell["eager_step_ms"]] * 2, color=color, linewidth=1.2, linestyle="--")
        legend.setdefault("~eager side", Line2D([], [], color="0.3", **SIDE_LEGEND["~eager side"]))
    for key, gpu_ms, fill in (
        ("~gpu", cell["gpu_ms"], color),
        ("~gpu eager side", cell["eager_gpu_ms"], "white"),
    ):
        if pd.notna(gpu_ms):
            ax.plot(x, np.full(GPU_MARKS, gpu_ms), color=color, marker="d", ms=3.5, mfc=fill, linestyle="")
            legend.setdefault(key, Line2D([], [], color="0.3", **SIDE_LEGEND[key]))


def step_time_figure(metrics: pd.DataFrame, steps: pd.DataFrame) -> Figure:
    """Small multiples: a panel per workload, step time over steps of each of its cells (a line per
    replicate, log scale over the measured steps), warm-up steps shaded and their highest time
    written where it lies above the panel. A paired cell's own eager side (not the separate eager
    cell: the side its speedup is over) is a dashed level at its measured step, in the cell's colour;
    where the GPU time per step was measured, a row of diamonds at it for each side (filled: the
    cell's own steps, hollow: its eager side), so the gap to a side's line is the host's time."""
    workloads = workload_labels(metrics)
    shown, left_out = first_workloads(
        workloads[metrics["cell_id"].isin(set(steps["cell_id"].unique()))], MAX_PANELS
    )
    columns = min(len(shown), PANEL_COLUMNS) or 1
    rows = -(-len(shown) // columns) or 1
    fig = Figure(
        figsize=(FIGSIZE[0], max(FIGSIZE[1] / 2, 0.9 + PANEL_INCHES * rows)), dpi=DPI, layout="constrained"
    )
    fig.suptitle("Step time over steps (log scale; warm-up shaded: compilation happens there)" + left_out)
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    if not shown:
        empty(axes[0], "no steps recorded")
    palette, labels = backend_colors(backend_labels(metrics)), backend_labels(metrics)
    drawn = steps[steps["cell_id"].isin(set(metrics["cell_id"][workloads.isin(shown)]))]
    by_cell = dict(tuple(drawn.sort_values("step").groupby("cell_id", sort=False, observed=True)))
    legend = {}
    for ax, workload in zip(axes, shown):
        mine = [(metrics.iloc[i], labels.iloc[i]) for i in np.flatnonzero((workloads == workload).to_numpy())]
        mine = [(cell, label, by_cell[cell["cell_id"]]) for cell, label in mine if cell["cell_id"] in by_cell]
        measured = pd.concat([s["step_time_ms"][s["phase"] == "measure"] for _, _, s in mine])
        levels = [level for cell, _, _ in mine for level in _levels(cell)]
        low, high = (
            (min([measured.min(), *levels]) / 1.2, max([measured.max(), *levels]) * 1.2)
            if len(measured)
            else (None, None)
        )
        for cell, label, cell_steps in mine:
            style = "-" if cell["status"] == COMPLETED else ":"
            runs = (
                cell_steps.groupby(REPEAT, sort=True) if REPEAT in cell_steps.columns else [(0, cell_steps)]
            )
            for _, run in runs:  # one line per replicate: each run starts again at step 0
                ax.plot(run["step"], run["step_time_ms"], color=palette[label], linewidth=1, linestyle=style)
            legend.setdefault(label, Line2D([], [], color=palette[label], label=label))
            _draw_levels(
                ax, cell, cell_steps["step"][cell_steps["phase"] == "measure"], palette[label], legend
            )
            if style != "-":
                legend.setdefault("~", Line2D([], [], color="0.3", linestyle=style, label="not completed"))
        warmup = pd.concat([s[s["phase"] == "warmup"] for _, _, s in mine])
        if len(warmup):
            ax.axvspan(warmup["step"].min() - 0.5, warmup["step"].max() + 0.5, color="0.88", zorder=0)
            legend.setdefault("~warm-up", Patch(color="0.88", label="warm-up steps"))
            if high is not None and warmup["step_time_ms"].max() > high:
                ax.text(
                    0.02,
                    0.97,
                    f"warm-up up to {fmt_number(warmup['step_time_ms'].max())} ms ↑",
                    transform=ax.transAxes,
                    va="top",
                    fontsize="x-small",
                    color="0.25",
                )
        ax.set_yscale("log")
        if low is not None:
            ax.set_ylim(low, high)
            plain_log_axis(ax.yaxis, low, high)
        ax.tick_params(labelsize=LABEL_SIZE, which="both")
        ax.set_title(workload.replace("\n", " "), fontsize="small")
        ax.set_xlabel("step", fontsize="small")
        ax.set_ylabel("ms", fontsize="small")
    for ax in axes[len(shown) :] if shown else []:
        ax.set_visible(False)
    if legend:
        fig.legend(
            handles=[legend[k] for k in sorted(legend)],
            loc="outside lower center",
            ncols=min(len(legend), 5),
            fontsize="small",
        )
    return fig
