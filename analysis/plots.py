"""Figures of a sweep, each written as PNG and SVG of a fixed size (FIGSIZE at DPI).

Figures are `matplotlib.figure.Figure` objects, never pyplot's: no global backend or figure
registry is touched, so analysing in a process that also plots elsewhere is safe. Every figure is
written even without data for it (then it says so), so a report always links the same files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from analysis.collect import REPEAT
from analysis.metrics import DISTRIBUTED_AXES, SAME_WORKLOAD, backend_labels, workload_labels
from analysis.scaling import scaling_cells
from workloads.vocabulary import COMPLETED

FIGSIZE = (10.0, 6.0)  # inches
DPI = 100  # PNG pixels per inch: 1000 x 600
FORMATS = ("png", "svg")
#: Workloads one figure shows: step-time panels, groups of bars. Further ones are left out, and
#: the title counts them (the tables have every cell).
MAX_PANELS = 12
MAX_GROUPS = 40
NO_RESULT_COLOR = "tab:red"


def _colors(metrics: pd.DataFrame) -> dict[str, tuple]:
    """One color per backend label, the same in every figure."""
    palette = [f"C{i}" for i in range(10)]
    return {label: palette[i % len(palette)] for i, label in enumerate(sorted(set(backend_labels(metrics))))}


def _figure(title: str) -> tuple[Figure, Axes]:
    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    ax.set_title(title)
    return fig, ax


def _whiskers(value: pd.Series, low: pd.Series, high: pd.Series) -> np.ndarray:
    """Error-bar lengths below and above each value (none where the interval is unknown)."""
    # A percentile interval need not hold its point estimate, and rounding can put a point
    # estimate a hair outside a zero-width one: matplotlib refuses negative lengths.
    return np.clip(np.vstack([value - low.fillna(value), high.fillna(value) - value]), 0, None)


def _empty(ax: Axes, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def _first(workloads: pd.Series, limit: int) -> tuple[list[str], str]:
    """The first `limit` distinct workloads, and what to add to the title when that leaves some out."""
    distinct = list(dict.fromkeys(workloads))
    return distinct[:limit], (f" (first {limit} of {len(distinct)} workloads)" if len(distinct) > limit else "")


def _grouped_bars(ax: Axes, metrics: pd.DataFrame, value: pd.Series, low: pd.Series, high: pd.Series,
                  missing_at: float) -> None:
    """Bars per workload (x) and backend (color) with whiskers low..high; a cell without a value
    (failed, not_compiled, no eager cell) is a red x at `missing_at`."""
    colors = _colors(metrics)
    workloads = workload_labels(metrics)
    order, left_out = _first(workloads, MAX_GROUPS)
    shown = workloads.isin(order).to_numpy()
    metrics, workloads, value, low, high = metrics[shown], workloads[shown], value[shown], low[shown], high[shown]
    ax.set_title(ax.get_title() + left_out)
    labels = backend_labels(metrics)
    backends = sorted(set(labels))
    width = 0.8 / max(len(backends), 1)
    x = np.array([order.index(w) for w in workloads]) + (np.array([backends.index(b) for b in labels]) + 0.5) * width - 0.4
    has = value.notna().to_numpy()
    for backend in backends:
        mine = (labels == backend).to_numpy() & has
        ax.bar(x[mine], value[mine], width, color=colors[backend], label=backend,
               yerr=_whiskers(value[mine], low[mine], high[mine]), capsize=2)
    if (~has).any():
        ax.scatter(x[~has], np.full((~has).sum(), missing_at), marker="x", color=NO_RESULT_COLOR, zorder=3,
                   label="no value (failed, not_compiled, no eager cell)")
    crowded = len(order) > 6  # long labels on one rotated line each
    ax.set_xticks(range(len(order)), [w.replace("\n", " ") for w in order] if crowded else order,
                  rotation=60 if crowded else 0, ha="right" if crowded else "center",
                  fontsize="x-small" if crowded else "medium")
    ax.legend(fontsize="small")


def speedup_figure(metrics: pd.DataFrame, steps: pd.DataFrame) -> Figure:
    """Speedup over eager with its 95% interval, per workload and backend."""
    fig, ax = _figure("Speedup over eager (median step), 95% bootstrap interval over runs, then steps")
    compiled = metrics[metrics["backend"] != "eager"]
    if compiled.empty:
        _empty(ax, "no compiled cells")
        return fig
    _grouped_bars(ax, compiled, compiled["speedup"], compiled["speedup_low"], compiled["speedup_high"], 1.0)
    ax.axhline(1.0, color="0.3", linewidth=1, linestyle="--")
    ax.set_ylabel("speedup (eager = 1)")
    return fig


def mfu_figure(metrics: pd.DataFrame, steps: pd.DataFrame) -> Figure:
    """Model FLOP utilisation, mean ± std over measured steps, per workload and backend."""
    fig, ax = _figure("MFU over measured steps (mean ± std)")
    if metrics["mfu_mean"].isna().all():
        _empty(ax, "no MFU: no peak FLOP/s known for these devices")
        return fig
    mean, std = 100 * metrics["mfu_mean"], 100 * metrics["mfu_std"].fillna(0)
    _grouped_bars(ax, metrics, mean, mean - std, mean + std, 0.0)
    ax.set_ylabel("MFU (%)")
    return fig


def step_time_figure(metrics: pd.DataFrame, steps: pd.DataFrame) -> Figure:
    """Step time over the steps of each cell (log scale), one line per replicate, warm-up shaded:
    compilation is its spike."""
    workloads = workload_labels(metrics)
    shown, left_out = _first(workloads[metrics["cell_id"].isin(set(steps["cell_id"].unique()))], MAX_PANELS)
    title = "Step time over steps (warm-up shaded)" + left_out
    columns = min(len(shown), 4) or 1
    rows = -(-len(shown) // columns) or 1
    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    fig.suptitle(title)
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    if not shown:
        _empty(axes[0], "no steps recorded")
    colors, labels = _colors(metrics), backend_labels(metrics)
    drawn = steps[steps["cell_id"].isin(set(metrics["cell_id"][workloads.isin(shown)]))]
    by_cell = dict(tuple(drawn.sort_values("step").groupby("cell_id", sort=False, observed=True)))
    legend = {}
    for ax, workload in zip(axes, shown):
        for i in np.flatnonzero((workloads == workload).to_numpy()):
            cell, label = metrics.iloc[i], labels.iloc[i]
            mine = by_cell.get(cell["cell_id"])
            if mine is None:
                continue
            style = "-" if cell["status"] == COMPLETED else ":"
            runs = mine.groupby(REPEAT, sort=True) if REPEAT in mine.columns else [(0, mine)]
            for _, run in runs:  # one line per replicate: each run starts again at step 0
                ax.plot(run["step"], run["step_time_ms"], color=colors[label], linewidth=1, linestyle=style)
            legend.setdefault(label, Line2D([], [], color=colors[label], label=label))
            if style != "-":
                legend.setdefault("", Line2D([], [], color="0.3", linestyle=style, label="not completed"))
            warmup = mine["step"][mine["phase"] == "warmup"]
            if len(warmup):
                ax.axvspan(warmup.min() - 0.5, warmup.max() + 0.5, color="0.85", zorder=0)
        ax.set_yscale("log")
        ax.set_title(workload, fontsize="small")
        ax.set_xlabel("step", fontsize="small")
        ax.set_ylabel("ms", fontsize="small")
    for ax in axes[len(shown):] if shown else []:
        ax.set_visible(False)
    if legend:
        fig.legend(handles=[legend[k] for k in sorted(legend, key=lambda k: (k == "", k))], loc="outside right upper",
                   fontsize="small")
    return fig


def compile_speedup_figure(metrics: pd.DataFrame, steps: pd.DataFrame) -> Figure:
    """What compiling cost (s) against what it gained (speedup), one point per compiled cell."""
    fig, ax = _figure("Compile time against speedup")
    cells = metrics[(metrics["backend"] != "eager") & metrics["speedup"].notna() & metrics["compile_time_s"].notna()]
    if cells.empty:
        _empty(ax, "no compiled cell with both a compile time and a speedup")
        return fig
    colors, labels = _colors(metrics), backend_labels(cells)
    for label, group in cells.groupby(labels, sort=True):
        ax.errorbar(group["compile_time_s"], group["speedup"], fmt="o", color=colors[label], label=label,
                    yerr=_whiskers(group["speedup"], group["speedup_low"], group["speedup_high"]))
    if len(cells) <= 20:
        for workload, x, y in zip(workload_labels(metrics)[cells.index], cells["compile_time_s"], cells["speedup"]):
            ax.annotate(workload, (x, y), fontsize="x-small", xytext=(3, 3), textcoords="offset points")
    if (cells["compile_time_s"] > 0).all():
        ax.set_xscale("log")
    ax.axhline(1.0, color="0.3", linewidth=1, linestyle="--")
    ax.set_xlabel("compile time (s)")
    ax.set_ylabel("speedup over eager")
    ax.legend(fontsize="small")
    return fig


def data_wait_figure(metrics: pd.DataFrame, steps: pd.DataFrame) -> Figure:
    """Per cell: compute time per step against the share of it spent waiting for data."""
    fig, ax = _figure("Data wait against compute, per cell (mean over measured steps)")
    cells = metrics[metrics["data_wait_share"].notna()]
    if cells.empty:
        _empty(ax, "no data-wait times recorded")
        return fig
    colors, labels = _colors(metrics), backend_labels(cells)
    compute = cells["mean_step_ms"] * (1 - cells["data_wait_share"])
    for label in sorted(set(labels)):
        mine = (labels == label).to_numpy()
        ax.scatter(compute[mine], 100 * cells["data_wait_share"][mine], color=colors[label], label=label)
    if (compute > 0).all():
        ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("compute per step (ms) = step time - data wait")
    ax.set_ylabel("data wait (% of step time)")
    ax.legend(fontsize="small")
    return fig


def scaling_figure(metrics: pd.DataFrame, steps: pd.DataFrame) -> Figure:
    """Per workload and backend against the processes: scaling efficiency (throughput over N times
    the 1-process cell's) and speedup over eager at the same processes, with 95% intervals."""
    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    efficiency_ax, eager_ax = fig.subplots(1, 2)
    cells = scaling_cells(metrics)
    workloads = workload_labels(cells, [a for a in SAME_WORKLOAD if a not in DISTRIBUTED_AXES]).str.replace("\n", " ")
    shown, left_out = _first(workloads, MAX_PANELS)
    fig.suptitle("Scaling over processes, 95% bootstrap intervals over runs, then steps" + left_out)
    if not shown:
        _empty(efficiency_ax, "no multi-process cells")
        eager_ax.set_visible(False)
        return fig
    colors, labels = _colors(metrics), backend_labels(cells)
    processes = cells["world_size"].astype(float)
    markers = dict(zip(shown, "osD^v<>pPX*h"))
    for (workload, label), series in cells.groupby([workloads, labels], sort=False):
        if workload not in markers:
            continue
        x, style = processes[series.index], dict(color=colors[label], marker=markers[workload], capsize=2)
        value, low, high = (100 * series[f"scaling_efficiency{end}"] for end in ("", "_low", "_high"))
        efficiency_ax.errorbar(x, value, yerr=_whiskers(value, low, high), **style)
        if label != "eager":
            eager_ax.errorbar(x, series["speedup"], yerr=_whiskers(
                series["speedup"], series["speedup_low"], series["speedup_high"]), **style)
    ticks = sorted(set(processes.dropna()))
    panels = ((efficiency_ax, "Scaling efficiency (100% = linear)", "items/s over N x 1 process (%)", 100.0),
              (eager_ax, "Compiled over eager at the same processes", "speedup over eager", 1.0))
    for ax, title, ylabel, even in panels:
        ax.axhline(even, color="0.3", linewidth=1, linestyle="--")
        ax.set_title(title, fontsize="medium")
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.set_xlabel("processes")
        ax.set_ylabel(ylabel)
    handles = [Line2D([], [], color=colors[label], label=label) for label in sorted(set(labels))]
    handles += [Line2D([], [], color="0.3", marker=marker, linestyle="", label=w) for w, marker in markers.items()]
    fig.legend(handles=handles, loc="outside right upper", fontsize="small")
    return fig


FIGURES: dict[str, Callable[[pd.DataFrame, pd.DataFrame], Figure]] = {
    "speedup": speedup_figure,
    "step_times": step_time_figure,
    "mfu": mfu_figure,
    "compile_vs_speedup": compile_speedup_figure,
    "data_wait": data_wait_figure,
    "scaling": scaling_figure,
}


def write_plots(metrics: pd.DataFrame, steps: pd.DataFrame, directory: Path) -> dict[str, list[Path]]:
    """Every figure of FIGURES as `directory/<name>.png` and `.svg`; {name: [paths]}."""
    directory.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, make in FIGURES.items():
        fig = make(metrics, steps)
        written[name] = [directory / f"{name}.{fmt}" for fmt in FORMATS]
        for path in written[name]:
            fig.savefig(path, dpi=DPI)
    return written
