"""The sweep's own tables beside the per-cell one (table.py): cells counted by status, geometric-mean
speedups, the break-even of compiling; and the study that gives every sweep these and its figures
(figures.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from analysis.cells.breakeven import BREAK_EVEN_COLUMNS, baseline_step_ms
from analysis.cells.loaded import Loaded
from analysis.reading.axes import backend_labels, workload_labels
from analysis.rendering.text import Table, fmt_break_even, fmt_number, fmt_speedup, fmt_warm
from analysis.statistics.bootstrap import geometric_mean
from analysis.statistics.verdicts import E2E_BASIS
from analysis.studies.base import Study
from analysis.studies.sweep.table import summary_table
from workloads.contract.vocabulary import BASELINE_BACKEND, ordered_states

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: Name of the break-even table (its file stem in report/tables/).
BREAK_EVEN = "break_even"


def status_table(metrics: pd.DataFrame) -> Table:
    """Cells counted by status, per backend and in all."""
    counts = pd.crosstab(backend_labels(metrics), metrics["status"])
    counts = counts[ordered_states(counts.columns)]
    counts = pd.concat([counts, counts.sum().to_frame("all").T])  # (.loc["all"] fails on pandas 2 when empty)
    counts["cells"] = counts.sum(axis=1)
    data = counts.rename_axis(index="backend", columns=None).reset_index()
    return Table("status", "Cells by status", data, data.astype(str))


def geomean_table(metrics: pd.DataFrame) -> Table:
    """Geometric-mean speedup per compiled backend, saying how many of its cells it covers."""
    rows = []
    for label, cells in metrics[metrics["backend"] != BASELINE_BACKEND].groupby(
        backend_labels(metrics), sort=True
    ):
        value, covered = geometric_mean(cells["speedup"].to_numpy(float))
        left_out = cells[cells["speedup"].isna()]["status"].value_counts()
        rows.append(
            {
                "backend": label,
                "geomean_speedup": value,
                "cells_covered": covered,
                "cells": len(cells),
                "not_covered": ", ".join(f"{n} {s}" for s, n in left_out.items()),
            }
        )
    data = pd.DataFrame(rows, columns=["backend", "geomean_speedup", "cells_covered", "cells", "not_covered"])
    text = pd.DataFrame({
        "backend": data["backend"],
        "geomean speedup": data["geomean_speedup"].map(fmt_speedup),
        "covers": [f"{k} of {n} cells" for k, n in zip(data["cells_covered"], data["cells"])],
        "not covered": data["not_covered"],
    })  # fmt: skip
    note = (
        "Over the cells with a speedup (completed, and paired or with an eager cell of the same workload), "
        "each the paired one where the cell measured paired."
    )
    return Table("geomean", "Geometric-mean speedup over eager", data, text, note)


def _texts(data: pd.DataFrame, column: str, whole: bool = False, warm: pd.Series | None = None) -> list[str]:
    """Break-even counts; `(warm)` after those that rest on a warm compile (`warm`)."""
    warm = pd.Series(None, index=data.index, dtype=object) if warm is None else warm
    return [
        fmt_warm(fmt_break_even(value, pays_off, whole), was_warm if pays_off is True else None)
        for value, pays_off, was_warm in zip(data[column], data["pays_off"], warm)
    ]


def break_even_table(metrics: pd.DataFrame) -> Table:
    """Per compiled cell with a compile time and a speedup: the steps and GPU-minutes after which
    compiling pays for itself (analysis/cells/breakeven.py), with the cold compile and the warm one."""
    cells = metrics[metrics["pays_off"].notna()]
    e2e = cells["verdict_basis"] == E2E_BASIS
    eager = baseline_step_ms(metrics, cells, e2e)
    speedup = np.where(e2e, cells["e2e_speedup"], cells["speedup"]).astype(float)
    data = pd.DataFrame({
        "cell_id": cells["cell_id"], "backend": backend_labels(cells), "basis": cells["verdict_basis"],
        "eager_step_ms": eager, "compiled_step_ms": eager / speedup,
        **{column: cells[column] for column in BREAK_EVEN_COLUMNS},
    })  # fmt: skip
    warm = data["break_even_compile_warm"]
    text = pd.DataFrame({
        "cell": data["cell_id"],
        "workload": workload_labels(cells).str.replace("\n", " "),
        "backend": data["backend"],
        "eager ms": data["eager_step_ms"].map(fmt_number),
        "compiled ms": data["compiled_step_ms"].map(fmt_number),
        "step basis": np.where(e2e, "mean (end to end)", "median"),
        "compile s": [fmt_warm(fmt_number(s), w) for s, w in zip(data["break_even_compile_s"], warm)],
        "steps": _texts(data, "break_even_steps", whole=True, warm=warm),
        "GPU-min": _texts(data, "break_even_gpu_min", warm=warm),
    })  # fmt: skip
    if data["compile_warm_s"].notna().any():
        text["warm compile s"] = data["compile_warm_s"].map(fmt_number)
        text["steps (warm)"] = _texts(data, "break_even_steps_warm", whole=True)
        text["GPU-min (warm)"] = _texts(data, "break_even_gpu_min_warm")
    note = (
        "Compiling pays for itself after compile s / (eager step - compiled step) steps, never where the "
        "compiled step is not faster; GPU-minutes: those steps at the eager step, times the processes (one "
        "GPU each). Steps as the verdict's: median steps, or mean steps where the speedup is end to end "
        "(data-bound); a paired cell's eager step is its own median step x its paired speedup (its eager "
        "side, measured in its process). Compile s: the cold compile where measured "
        "(compile.measure=cold_warm, or a replicate whose compile found no FX graph or AOTAutograd cache "
        "entry), else the workload's "
        "compile time, marked (warm) where it found an earlier compile's entries (a later cell of a packed "
        "task or a shared cache); warm compile s: compiled again with the caches the first left."
    )
    return Table(BREAK_EVEN, "Break-even: steps until compiling pays off", data, text, note)


class SweepTables(Study):
    """Every sweep's training cells: the per-cell table, status counts, geometric means, break-even;
    the figures of its cells. A sweep of GEMM cells only has none of them (analysis/studies/gemm/)."""

    def tables(self, loaded: Loaded) -> list[Table]:
        if len(loaded.training) == 0 and len(loaded.gemm):
            return []
        metrics = loaded.training
        return [
            summary_table(metrics, loaded.equivalence, loaded.data_bound, loaded.launch_bound),
            status_table(metrics),
            geomean_table(metrics),
            break_even_table(metrics),
        ]

    def figures(self, loaded: Loaded) -> Iterator[tuple[str, Figure]]:
        from analysis.studies.sweep.figures import FIGURES  # matplotlib: only when plotting

        if len(loaded.training):
            for name, make in FIGURES.items():
                yield name, make(loaded.training, loaded.data.steps)
