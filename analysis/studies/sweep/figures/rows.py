"""Figures of a row per cell, in table order: its MFU, and its measured time split into waiting for
data and the rest."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from analysis.reading.axes import (
    backend_labels,
    cell_labels,
)
from analysis.rendering.figure_layout import (
    LABEL_SIZE,
    empty,
    figure,
    rows_height,
    set_row_labels,
    shown_rows,
    whiskers,
)
from analysis.rendering.palette import DATA_WAIT, backend_colors
from analysis.rendering.text import fmt_number


def value_labels(ax, texts: list[str]) -> None:
    """Text at the right of each row (row i at y = i), on a twin axis sharing the rows."""
    right = ax.twinx()
    right.set_ylim(ax.get_ylim())
    right.set_yticks(range(len(texts)), texts, fontsize=LABEL_SIZE)
    right.tick_params(right=False)


def per_cell_figure(metrics: pd.DataFrame, column: str, title: str):
    """The figure of a row per cell with a value of `column` (table order), or None where none has one."""
    cells = metrics[metrics[column].notna()]
    positions, left_out = shown_rows(len(cells))
    cells = cells.iloc[positions]
    fig, ax = figure(title + left_out, rows_height(len(cells)))
    if cells.empty:
        return fig, ax, None
    set_row_labels(ax, cell_labels(cells).tolist())
    return fig, ax, cells


def mfu_figure(metrics: pd.DataFrame, steps: pd.DataFrame) -> Figure:
    """Model FLOP utilisation per cell, mean ± std over measured steps."""
    fig, ax, cells = per_cell_figure(metrics, "mfu_mean", "MFU over measured steps (mean ± std)")
    if cells is None:
        empty(ax, "no MFU: no peak FLOP/s known for these devices")
        return fig
    mean, std = 100 * cells["mfu_mean"], 100 * cells["mfu_std"].fillna(0)
    palette = backend_colors(backend_labels(metrics))
    ax.barh(
        np.arange(len(cells)),
        mean,
        color=[palette[b] for b in backend_labels(cells)],
        xerr=whiskers(mean, mean - std, mean + std),
        capsize=2,
    )
    ax.set_xlabel("MFU (% of the devices' peak FLOP/s)")
    value_labels(ax, [f"{m:.1f}% ± {s:.1f}" for m, s in zip(mean, std)])
    return fig


def data_wait_figure(metrics: pd.DataFrame, steps: pd.DataFrame) -> Figure:
    """Per cell, its measured span split into waiting for data and the rest (compute, launches,
    synchronisation): shares of the span, so the two parts add up to 100% for every cell; the mean
    step (span / measured steps) is written beside each bar."""
    fig, ax, cells = per_cell_figure(
        metrics,
        "data_wait_share",
        "Measured time per cell: waiting for data and the rest (share of the span)",
    )
    if cells is None:
        empty(ax, "no data-wait times recorded")
        return fig
    # A wait is timed on the host inside a step; should it exceed the step, the bar is all wait.
    wait = 100 * cells["data_wait_share"].clip(0, 1)
    y, palette = np.arange(len(cells)), backend_colors(backend_labels(metrics))
    ax.barh(y, 100 - wait, color=[palette[b] for b in backend_labels(cells)])
    ax.barh(y, wait, left=100 - wait, color=DATA_WAIT, hatch="///", edgecolor="0.55", linewidth=0)
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of the measured span (the sum of the measured steps' times)")
    value_labels(
        ax, [f"{fmt_number(mean)} ms/step, {w:.0f}% waiting" for mean, w in zip(cells["mean_step_ms"], wait)]
    )
    handles = [Patch(color=palette[b], label=b) for b in sorted(set(backend_labels(cells)))]
    handles.append(Patch(facecolor=DATA_WAIT, hatch="///", edgecolor="0.55", label="waiting for data"))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 4), fontsize="small")
    return fig
