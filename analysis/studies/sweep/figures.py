"""Figures of a sweep, each written as PNG and SVG (layout and sizes: analysis/rendering/figure_layout.py;
colours: analysis/rendering/palette.py, one per backend, the same in every figure).

Every figure is written even without data for it (then it says so), so a report always links the
same files. Per-cell figures have a row per cell, labelled with its workload and backend.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from analysis.cells.breakeven import baseline_step_ms
from analysis.reading.axes import (
    backend_labels,
    cell_labels,
    workload_labels,
)
from analysis.reading.collect import REPEAT
from analysis.rendering.figure_layout import (
    DPI,
    FIGSIZE,
    LABEL_SIZE,
    empty,
    figure,
    first_workloads,
    log_log,
    plain_log_axis,
    rows_height,
    set_row_labels,
    shown_rows,
    whiskers,
)
from analysis.rendering.palette import DATA_WAIT, NO_VALUE, backend_colors
from analysis.rendering.text import fmt_break_even, fmt_number, fmt_speedup
from analysis.statistics.verdicts import decisive_speedup
from workloads.contract.vocabulary import BASELINE_BACKEND, COMPLETED

#: Workloads a figure of panels shows (the title counts the others; the tables have every cell).
MAX_PANELS = 24
PANEL_COLUMNS, PANEL_INCHES = 3, 2.4
#: Steps to break even that the compile-time figure draws a line for (those its range reaches).
BREAK_EVEN_STEPS = (10, 100, 1_000, 10_000, 100_000, 1_000_000)


def _value_labels(ax, texts: list[str]) -> None:
    """Text at the right of each row (row i at y = i), on a twin axis sharing the rows."""
    right = ax.twinx()
    right.set_ylim(ax.get_ylim())
    right.set_yticks(range(len(texts)), texts, fontsize=LABEL_SIZE)
    right.tick_params(right=False)


def speedup_figure(metrics: pd.DataFrame, steps: pd.DataFrame) -> Figure:
    """A forest plot: every compiled cell's speedup over eager with its 95% interval on a log axis,
    fastest on top; hollow where the verdict rests on end-to-end throughput (data-bound); cells
    without a speedup (failed, not_compiled, no eager cell) at the bottom, saying why."""
    title = "Speedup over eager, 95% bootstrap interval over runs, then steps"
    compiled = metrics[metrics["backend"] != BASELINE_BACKEND]
    if compiled.empty:
        fig, ax = figure(title)
        empty(ax, "no compiled cells")
        return fig
    speed, e2e = decisive_speedup(compiled)
    order = speed["value"].sort_values(ascending=False, na_position="last", kind="stable").index
    positions, left_out = shown_rows(len(order))
    order = order[positions]
    fig, ax = figure(title + left_out, rows_height(len(order)))
    rows, e2e, backends = (
        speed.loc[order],
        e2e.loc[order].to_numpy(),
        backend_labels(compiled).loc[order].to_numpy(),
    )
    y, has, palette = (
        np.arange(len(order)),
        rows["value"].notna().to_numpy(),
        backend_colors(backend_labels(metrics)),
    )
    for backend in sorted(set(backends[has])):
        for hollow in (False, True):
            mine = (backends == backend) & has & (e2e == hollow)
            if mine.any():
                ax.errorbar(
                    rows["value"][mine],
                    y[mine],
                    xerr=whiskers(*(rows[c][mine] for c in rows)),
                    fmt="o",
                    color=palette[backend],
                    mfc="white" if hollow else palette[backend],
                    capsize=2,
                    ms=5,
                )
    status = compiled["status"].loc[order].to_numpy()
    ax.scatter(np.ones((~has).sum()), y[~has], marker="x", color=NO_VALUE, zorder=3)
    ax.axvline(1.0, color="0.3", linewidth=1, linestyle="--")
    ax.set_xscale("log")
    low, high = rows["low"].fillna(rows["value"]), rows["high"].fillna(rows["value"])
    limits = (min(1.0, low.min()) / 1.1, max(1.0, high.max()) * 1.1)
    ax.set_xlim(*limits)
    plain_log_axis(ax.xaxis, *limits)
    ax.set_xlabel("speedup over eager (log scale; right of 1: faster than eager)")
    ax.grid(axis="x", color="0.9")
    ax.tick_params(axis="x", top=True, labeltop=len(order) > 30)  # a tall figure has its scale on top too
    set_row_labels(ax, cell_labels(compiled).loc[order].tolist())
    _value_labels(
        ax,
        [
            fmt_speedup(*v) + (" e2e" if hollow else "") if ok else (s if s != COMPLETED else "no eager cell")
            for v, ok, hollow, s in zip(rows.to_numpy(), has, e2e, status)
        ],
    )
    handles = [
        Line2D([], [], color=palette[b], marker="o", linestyle="", label=b)
        for b in sorted(set(backends[has]))
    ]
    if e2e[has].any():
        handles.append(
            Line2D(
                [], [], color="0.3", marker="o", mfc="white", linestyle="", label="end to end (data-bound)"
            )
        )
    if (~has).any():
        handles.append(Line2D([], [], color=NO_VALUE, marker="x", linestyle="", label="no speedup"))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 4), fontsize="small")
    return fig


def _per_cell(metrics: pd.DataFrame, column: str, title: str):
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
    fig, ax, cells = _per_cell(metrics, "mfu_mean", "MFU over measured steps (mean ± std)")
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
    _value_labels(ax, [f"{m:.1f}% ± {s:.1f}" for m, s in zip(mean, std)])
    return fig


def data_wait_figure(metrics: pd.DataFrame, steps: pd.DataFrame) -> Figure:
    """Per cell, its measured span split into waiting for data and the rest (compute, launches,
    synchronisation): shares of the span, so the two parts add up to 100% for every cell; the mean
    step (span / measured steps) is written beside each bar."""
    fig, ax, cells = _per_cell(
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
    _value_labels(
        ax, [f"{fmt_number(mean)} ms/step, {w:.0f}% waiting" for mean, w in zip(cells["mean_step_ms"], wait)]
    )
    handles = [Patch(color=palette[b], label=b) for b in sorted(set(backend_labels(cells)))]
    handles.append(Patch(facecolor=DATA_WAIT, hatch="///", edgecolor="0.55", label="waiting for data"))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 4), fontsize="small")
    return fig


def step_time_figure(metrics: pd.DataFrame, steps: pd.DataFrame) -> Figure:
    """Small multiples: a panel per workload, step time over steps of each of its cells (a line per
    replicate, log scale over the measured steps), warm-up steps shaded and their highest time
    written where it lies above the panel."""
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
        low, high = (measured.min() / 1.2, measured.max() * 1.2) if len(measured) else (None, None)
        for cell, label, cell_steps in mine:
            style = "-" if cell["status"] == COMPLETED else ":"
            runs = (
                cell_steps.groupby(REPEAT, sort=True) if REPEAT in cell_steps.columns else [(0, cell_steps)]
            )
            for _, run in runs:  # one line per replicate: each run starts again at step 0
                ax.plot(run["step"], run["step_time_ms"], color=palette[label], linewidth=1, linestyle=style)
            legend.setdefault(label, Line2D([], [], color=palette[label], label=label))
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


def compile_speedup_figure(metrics: pd.DataFrame, steps: pd.DataFrame) -> Figure:
    """What compiling cost against what it gained: compile time in eager steps (x) against the
    speedup (y), with the curves of breaking even after N steps. Compiling once pays off after
    compile time / (eager step - compiled step) = x / (1 - 1/speedup) steps (analysis/cells/breakeven.py),
    so the curve of N steps is speedup = 1 / (1 - x / N), the same for every workload; a cell left
    of a curve pays off within its N steps, one below 1 never. A cell whose warm compile was
    measured has a second, hollow point at the warm compile time, joined to the cold one."""
    fig, ax = figure("Compile time against speedup; dashed: where compiling breaks even after N steps")
    cells = metrics[metrics["backend"] != BASELINE_BACKEND]
    speed, e2e = decisive_speedup(cells)
    eager_ms = baseline_step_ms(metrics, cells, e2e)
    cold_s, warm_s = (cells[name].to_numpy(float) for name in ("break_even_compile_s", "compile_warm_s"))
    x = pd.Series(1000 * cold_s / eager_ms, index=cells.index)  # compile times in eager steps
    warm = pd.Series(1000 * warm_s / eager_ms, index=cells.index)
    usable = speed["value"].notna() & (x > 0)
    if not usable.any():
        empty(ax, "no compiled cell with both a compile time and a speedup")
        return fig
    cells, speed, x, warm = cells[usable], speed[usable], x[usable], warm[usable]
    palette = backend_colors(backend_labels(metrics))
    for label, group in speed.groupby(backend_labels(cells), sort=True):
        ax.errorbar(
            x[group.index],
            group["value"],
            yerr=whiskers(group["value"], group["low"], group["high"]),
            fmt="o",
            color=palette[label],
            label=label,
            capsize=2,
        )
        warmed = warm[group.index].notna() & (warm[group.index] > 0)
        for i in group.index[warmed]:
            ax.plot(
                [x[i], warm[i]],
                [group.at[i, "value"]] * 2,
                color=palette[label],
                linewidth=0.8,
                linestyle=":",
            )
        ax.plot(warm[group.index][warmed], group["value"][warmed], "o", mfc="white", color=palette[label])
    if (warm > 0).any():
        ax.plot([], [], "o", mfc="white", color="0.3", label="warm compile (caches of a first compile)")
    x_low, x_high = np.fmin(x.min(), warm[warm > 0].min()) / 3, x.max() * 3
    y_low = min(0.8, speed["low"].fillna(speed["value"]).min() / 1.1)
    y_high = max(2.5, speed["high"].fillna(speed["value"]).max() * 1.2)
    ax.axhspan(y_low, 1.0, color="#fbe3e3", zorder=0)
    ax.text(
        x_low * 1.1, 0.98, "slower than eager: never breaks even", va="top", fontsize="x-small", color="0.35"
    )
    # Curves that stay within 5% of 1 over the range say nothing: N above 20 x the widest x.
    for n in (n for n in BREAK_EVEN_STEPS if x_low < n <= x_high * 20):
        curve = np.geomspace(x_low, min(n * (1 - 1 / y_high), x_high), 200)
        ax.plot(curve, 1 / (1 - curve / n), color="0.55", linewidth=0.8, linestyle="--", zorder=1)
        ax.text(
            curve[-1],
            1 / (1 - curve[-1] / n),
            f"{n:,} steps ",
            fontsize="x-small",
            color="0.35",
            ha="right",
            va="top",
        )
    if len(cells) <= 20:
        for i, workload in zip(cells.index, workload_labels(cells).str.replace("\n", " ")):
            pays_off = cells.at[i, "pays_off"]
            text = f"{workload}: {_steps_text(cells.at[i, 'break_even_steps'], pays_off)}"
            if pays_off is True and pd.notna(cells.at[i, "break_even_steps_warm"]):
                text += (
                    f" (warm {fmt_break_even(cells.at[i, 'break_even_steps_warm'], pays_off, whole=True)})"
                )
            right_half = x[i] > np.sqrt(x_low * x_high)  # labels there run leftwards, into the axes
            ax.annotate(
                text,
                (x[i], speed.at[i, "value"]),
                fontsize="x-small",
                xytext=(-4 if right_half else 4, 4),
                textcoords="offset points",
                ha="right" if right_half else "left",
            )
    ax.axhline(1.0, color="0.3", linewidth=1)
    log_log(
        ax,
        (x_low, x_high),
        (y_low, y_high),
        "compile time, in steps of the eager cell (compile s / eager step)",
        "speedup over eager (95% interval)",
    )
    ax.legend(fontsize="small", loc="upper left")
    return fig


def _steps_text(steps: float, pays_off: object) -> str:
    """`875 steps`, or `never`."""
    text = fmt_break_even(steps, pays_off, whole=True)
    return text if text == "never" else f"{text} steps"


FIGURES: dict[str, Callable[[pd.DataFrame, pd.DataFrame], Figure]] = {
    "speedup": speedup_figure,
    "step_times": step_time_figure,
    "mfu": mfu_figure,
    "compile_vs_speedup": compile_speedup_figure,
    "data_wait": data_wait_figure,
}
