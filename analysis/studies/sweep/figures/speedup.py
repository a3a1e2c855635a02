"""What compiling gained: the forest plot of every compiled cell's speedup (of the wall step, and of the
GPU time per step beside it where measured), and the speedup against the compile time it cost, with
the curves of breaking even."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from analysis.cells.breakeven import baseline_step_ms
from analysis.reading.axes import (
    backend_labels,
    cell_labels,
    workload_labels,
)
from analysis.rendering.figure_layout import (
    empty,
    figure,
    log_log,
    plain_log_axis,
    rows_height,
    set_row_labels,
    shown_rows,
    whiskers,
)
from analysis.rendering.palette import NO_VALUE, backend_colors
from analysis.rendering.text import fmt_break_even, fmt_speedup
from analysis.statistics.verdicts import decisive_speedup
from analysis.studies.sweep.figures.rows import value_labels
from workloads.contract.vocabulary import BASELINE_BACKEND, COMPLETED

#: Steps to break even that the compile-time figure draws a line for (those its range reaches).
BREAK_EVEN_STEPS = (10, 100, 1_000, 10_000, 100_000, 1_000_000)
#: A cell's device-time speedup (eager GPU time per step / compiled; analysis/cells/metrics.py) with
#: its interval, drawn this far (in rows) below its wall speedup.
DEVICE_SPEEDUP, DEVICE_OFFSET = ["device_speedup", "device_speedup_low", "device_speedup_high"], 0.3


def speedup_figure(metrics: pd.DataFrame, steps: pd.DataFrame) -> Figure:
    """A forest plot: every compiled cell's speedup over eager with its 95% interval on a log axis,
    fastest on top; hollow where the verdict rests on end-to-end throughput (data-bound); cells
    without a speedup (failed, not_compiled, no eager cell) at the bottom, saying why. Beside each
    cell's wall speedup, where its GPU time per step was measured, a diamond: its device-time
    speedup, the same ratio of the GPU's time alone, which the host's speed does not move."""
    title = "Speedup over eager with its 95% interval (over runs, or within one run)"
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
    device = compiled.loc[order, DEVICE_SPEEDUP].set_axis(["value", "low", "high"], axis=1)
    on_gpu = device["value"].notna().to_numpy()
    for backend in sorted(set(backends[on_gpu])):
        mine = (backends == backend) & on_gpu
        ax.errorbar(
            device["value"][mine],
            y[mine] + DEVICE_OFFSET,
            xerr=whiskers(*(device[c][mine] for c in device)),
            fmt="D",
            color=palette[backend],
            capsize=2,
            ms=4,
        )
    status = compiled["status"].loc[order].to_numpy()
    ax.scatter(np.ones((~has).sum()), y[~has], marker="x", color=NO_VALUE, zorder=3)
    ax.axvline(1.0, color="0.3", linewidth=1, linestyle="--")
    ax.set_xscale("log")
    bounds = pd.concat([rows, device])
    low, high = bounds["low"].fillna(bounds["value"]), bounds["high"].fillna(bounds["value"])
    limits = (min(1.0, low.min()) / 1.1, max(1.0, high.max()) * 1.1)
    ax.set_xlim(*limits)
    plain_log_axis(ax.xaxis, *limits)
    ax.set_xlabel("speedup over eager (log scale; right of 1: faster than eager)")
    ax.grid(axis="x", color="0.9")
    ax.tick_params(axis="x", top=True, labeltop=len(order) > 30)  # a tall figure has its scale on top too
    set_row_labels(ax, cell_labels(compiled).loc[order].tolist())
    value_labels(
        ax,
        [
            fmt_speedup(*v) + (" e2e" if hollow else "") + (f" · GPU time {fmt_speedup(*d)}" if gpu else "")
            if ok
            else (s if s != COMPLETED else "no eager cell")
            for v, ok, hollow, s, d, gpu in zip(rows.to_numpy(), has, e2e, status, device.to_numpy(), on_gpu)
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
    if on_gpu.any():
        handles.append(
            Line2D(
                [],
                [],
                color="0.3",
                marker="D",
                ms=4,
                linestyle="",
                label="device-time speedup (of the GPU time per step)",
            )
        )
    if (~has).any():
        handles.append(Line2D([], [], color=NO_VALUE, marker="x", linestyle="", label="no speedup"))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 4), fontsize="small")
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
        "compile time, in eager steps (compile s / the eager step its speedup is over)",
        "speedup over eager (95% interval)",
    )
    ax.legend(fontsize="small", loc="upper left")
    return fig


def _steps_text(steps: float, pays_off: object) -> str:
    """`875 steps`, or `never`."""
    text = fmt_break_even(steps, pays_off, whole=True)
    return text if text == "never" else f"{text} steps"
