"""What the figures share: their size, rows of cells, labels, empty panels, and the one writer of
their files (`write_figures`: PNG and SVG).

Figures are `matplotlib.figure.Figure` objects, never pyplot's: no global backend or figure
registry is touched, so analysing in a process that also plots elsewhere is safe. They are
FIGSIZE wide; a figure with a row per cell grows ROW_INCHES per row, up to MAX_ROWS rows, so that
one cell and two hundred are both readable (labels at a fixed font size, never squeezed).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullLocator

FORMATS = ("png", "svg")  # the files of each figure
FIGSIZE = (10.0, 6.0)  # inches: the width of every figure, the height of those without rows
DPI = 100  # PNG pixels per inch
#: A figure with a row per cell: inches per row, and for its title, axis and legend.
ROW_INCHES, FRAME_INCHES = 0.2, 1.6
#: Cells one such figure shows (about 42 inches: 4,200 PNG pixels); the title counts the others.
MAX_ROWS = 200
LABEL_SIZE = 8  # points: fits a 0.2-inch row (14.4 points)


def figure(title: str, height: float = FIGSIZE[1]) -> tuple[Figure, Axes]:
    """A figure of one axes, FIGSIZE wide, `height` inches high."""
    fig = Figure(figsize=(FIGSIZE[0], height), dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    ax.set_title(title)
    return fig, ax


def rows_height(rows: int) -> float:
    """Inches of a figure with `rows` rows of cells (at least FIGSIZE's height / 2)."""
    return max(FIGSIZE[1] / 2, FRAME_INCHES + ROW_INCHES * rows)


def shown_rows(count: int) -> tuple[np.ndarray, str]:
    """Positions of the rows a per-cell figure draws of `count` (all up to MAX_ROWS, else the first
    and last MAX_ROWS / 2: the extremes of a sorted figure), and what to add to its title."""
    if count <= MAX_ROWS:
        return np.arange(count), ""
    half = MAX_ROWS // 2
    positions = np.r_[np.arange(half), np.arange(count - half, count)]
    return positions, f" ({MAX_ROWS} of {count} cells: the first and last {half})"


def set_row_labels(ax: Axes, labels: list[str]) -> None:
    """Row i of `labels` at y = i, the first row on top."""
    ax.set_yticks(range(len(labels)), labels, fontsize=LABEL_SIZE)
    ax.set_ylim(len(labels) - 0.5, -0.5)


def whiskers(value: pd.Series, low: pd.Series, high: pd.Series) -> np.ndarray:
    """Error-bar lengths below and above each value (none where the interval is unknown)."""
    # A percentile interval need not hold its point estimate, and rounding can put a point
    # estimate a hair outside a zero-width one: matplotlib refuses negative lengths.
    return np.clip(np.vstack([value - low.fillna(value), high.fillna(value) - value]), 0, None)


def empty(ax: Axes, message: str) -> None:
    """An axes that says why it has nothing to show."""
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def plain_log_axis(axis, low: float, high: float) -> None:
    """Ticks of a log axis from `low` to `high` as plain numbers (0.5, 2, 20): at 1, 2 and 5 times
    the powers of ten, or where the range spans less than a factor of 5, evenly spaced ones."""
    if high / low < 5:
        axis.set_major_locator(MaxNLocator(6, steps=[1, 2, 5, 10]))  # 1 among the ticks
    else:
        axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))


def log_log(ax: Axes, x: tuple[float, float], y: tuple[float, float], xlabel: str, ylabel: str) -> None:
    """Both axes logarithmic over these ranges, with plain tick labels (`plain_log_axis`), labelled."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(*x)
    ax.set_ylim(*y)
    plain_log_axis(ax.xaxis, *x)
    plain_log_axis(ax.yaxis, *y)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)


def first_workloads(workloads: pd.Series, limit: int) -> tuple[list[str], str]:
    """The first `limit` distinct workloads, and what to add to the title when that leaves some out."""
    distinct = list(dict.fromkeys(workloads))
    return distinct[:limit], (
        f" (first {limit} of {len(distinct)} workloads)" if len(distinct) > limit else ""
    )


def write_figures(figures: Iterable[tuple[str, Figure]], directory: Path) -> dict[str, list[Path]]:
    """Each (name, figure) as `directory/<name>.png` and `.svg`, in turn: {name: [paths]} (no
    directory without a figure)."""
    written = {}
    for name, fig in figures:
        directory.mkdir(parents=True, exist_ok=True)
        written[name] = [directory / f"{name}.{fmt}" for fmt in FORMATS]
        for path in written[name]:
            fig.savefig(path, dpi=DPI)
            # Laid out once, by the first file: a second constrained layout of a figure of 200
            # labelled rows would cost as much again.
            fig.set_layout_engine("none")
    return written
