"""Figures of a row per cell, in table order: its MFU, and its measured time split into waiting for
data and the rest, with the GPU's share of it (and a paired cell's own eager side beneath it)."""

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
from workloads.contract.vocabulary import BASELINE_BACKEND

#: A paired cell's eager side: `force_eager` blocks in the cell's own process, between its compiled
#: blocks (workloads/cell/paired.py), which its speedup is over; not the separate eager cell.
PAIRED_EAGER = "eager (paired, same process)"
#: The GPU's time per step of a side, drawn inside its bar: hatched, unfilled, half the bar's height.
GPU_BAR, GPU_BAR_HEIGHT = {"facecolor": "none", "edgecolor": "black", "hatch": "....", "linewidth": 0.6}, 0.4


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


def _time_rows(cells: pd.DataFrame, palette: dict[str, str]) -> pd.DataFrame:
    """The data-wait figure's rows: each cell's own steps, and below a paired cell its eager side;
    per row its label, colour, shares of its step waiting (%) and of the GPU working (%, NaN where
    not measured) and the text beside it."""
    rows = []
    for cell, label, backend in zip(cells.to_dict("records"), cell_labels(cells), backend_labels(cells)):
        wait = 100 * np.clip(cell["data_wait_share"], 0, 1)
        gpu, text = cell["gpu_ms"], f"{fmt_number(cell['mean_step_ms'])} ms/step, {wait:.0f}% waiting"
        rows.append((label, palette[backend], wait, 100 * gpu / cell["mean_step_ms"], text + _gpu_text(gpu)))
        if pd.notna(cell["eager_step_ms"]):
            gpu, step = cell["eager_gpu_ms"], cell["eager_step_ms"]
            text = f"{fmt_number(step)} ms/step (median)" + _gpu_text(gpu)
            rows.append((f"↳ {PAIRED_EAGER}", palette[BASELINE_BACKEND], 0.0, 100 * gpu / step, text))
    frame = pd.DataFrame(rows, columns=["label", "color", "wait", "gpu", "text"])
    return frame.assign(gpu=frame["gpu"].astype(float).clip(0, 100))


def _gpu_text(gpu_ms: float) -> str:
    return "" if pd.isna(gpu_ms) else f", GPU {fmt_number(gpu_ms)} ms"


def data_wait_figure(metrics: pd.DataFrame, steps: pd.DataFrame) -> Figure:
    """Per cell, its measured span split into waiting for data and the rest (compute, launches,
    synchronisation): shares of the span, so the two parts add up to 100% for every cell; the mean
    step (span / measured steps) is written beside each bar. Where the GPU's time per step was
    measured, an inner hatched bar: the share of the step the GPU worked (the rest of the bar is the
    host's: Python, launches, waits). A paired cell has a second row, its own eager side (measured in
    its process, between its compiled blocks; not the separate eager cell): its median step, as
    the speedup uses it, and its GPU time."""
    cells, palette = metrics[metrics["data_wait_share"].notna()], backend_colors(backend_labels(metrics))
    rows = _time_rows(cells, palette)
    positions, left_out = shown_rows(len(rows))
    rows = rows.iloc[positions]
    fig, ax = figure(
        "Measured time per step: waiting for data, the GPU working (inner bar) and the rest (share)"
        + left_out,
        rows_height(len(rows)),
    )
    if rows.empty:
        empty(ax, "no data-wait times recorded")
        return fig
    set_row_labels(ax, rows["label"].tolist())
    # A wait is timed on the host inside a step; should it exceed the step, the bar is all wait.
    y, wait, gpu = np.arange(len(rows)), rows["wait"].to_numpy(), rows["gpu"].to_numpy()
    ax.barh(y, 100 - wait, color=rows["color"].tolist())
    ax.barh(y, wait, left=100 - wait, color=DATA_WAIT, hatch="///", edgecolor="0.55", linewidth=0)
    on_gpu = ~np.isnan(gpu)
    ax.barh(y[on_gpu], gpu[on_gpu], height=GPU_BAR_HEIGHT, **GPU_BAR)
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of the measured span (the sum of the measured steps' times)")
    value_labels(ax, rows["text"].tolist())
    shown = set(backend_labels(cells)) | (
        {BASELINE_BACKEND} if cells["eager_step_ms"].notna().any() else set()
    )
    handles = [Patch(color=palette[b], label=b) for b in sorted(shown)]
    handles.append(Patch(facecolor=DATA_WAIT, hatch="///", edgecolor="0.55", label="waiting for data"))
    if on_gpu.any():
        handles.append(Patch(**GPU_BAR, label="the GPU working (its time per step)"))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 4), fontsize="small")
    return fig
