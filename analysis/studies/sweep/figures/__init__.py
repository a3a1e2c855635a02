"""Figures of a sweep, each written as PNG and SVG (layout and sizes: analysis/rendering/figure_layout.py;
colours: analysis/rendering/palette.py, one per backend, the same in every figure).

Every figure is written even without data for it (then it says so), so a report always links the
same files. Per-cell figures have a row per cell, labelled with its workload and backend.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
from matplotlib.figure import Figure

from analysis.studies.sweep.figures.rows import data_wait_figure, mfu_figure
from analysis.studies.sweep.figures.speedup import compile_speedup_figure, speedup_figure
from analysis.studies.sweep.figures.step_times import step_time_figure

FIGURES: dict[str, Callable[[pd.DataFrame, pd.DataFrame], Figure]] = {
    "speedup": speedup_figure,
    "step_times": step_time_figure,
    "mfu": mfu_figure,
    "compile_vs_speedup": compile_speedup_figure,
    "data_wait": data_wait_figure,
}
