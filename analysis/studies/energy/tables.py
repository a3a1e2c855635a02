"""The energy tables: per cell its J/step and items/J, the energy ratio beside the time speedup and
the break-even (analysis/cells/energy.py computes them); per compiled backend the geometric means of
both ratios over the same cells. A sweep without energy (CPU cells, sweeps before energy) has
neither, nor the figure (figure.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from analysis.cells.energy import ENERGY_COLUMNS, MIN_WINDOW_UPDATES
from analysis.cells.loaded import Loaded
from analysis.reading.axes import backend_labels, workload_labels
from analysis.rendering.text import (
    Table,
    fmt_break_even,
    fmt_interval,
    fmt_number,
    fmt_speedup,
    fmt_warm,
    is_null,
)
from analysis.statistics.bootstrap import geometric_mean
from analysis.studies.base import Study
from workloads.contract.vocabulary import BASELINE_BACKEND, COMPLETED

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ENERGY, ENERGY_BACKENDS = "energy", "energy_backends"
SPEEDUP = ["speedup", "speedup_low", "speedup_high", "speedup_method"]
NOTE = (
    "J/step: the GPU boards' energy (NVML; all GPUs of a cell) of the measured window over its steps: "
    "idle power included, the host's CPUs and memory not. A paired cell's is of its compiled blocks (each "
    "block's energy over its steps), the geometric mean over runs of each run's median block, 95% "
    "t interval over runs (one run: bootstrap of its pairs) (blocks of 0.5 s and more only: with "
    "shorter ones, the default 0.1 s, "
    "a paired cell has no energy per side; measure.block_seconds=1 gives it); any other cell's is the "
    "geometric mean over runs of each run's J/step, with "
    "a t interval over runs only from two runs on (one run measures one value). Items/J: items per step / "
    "J/step. (short: N updates): a run's window spanned fewer than "
    f"{MIN_WINDOW_UPDATES} updates of the counter (each end read up to an update stale: off by up to 1/N), "
    "as does the energy ratio marked (short window): shown, left out of the per-backend table. Avg W: the "
    "window's mean power, median over runs; idle W: the GPU's before the cell ran, once its power held "
    "within 1% for a second (not settled: not within 10 s). "
    "Energy ratio: eager J/step / own (above 1: compiling saves energy per step), paired (the median of "
    "the pair ratios, eager block / compiled block, as the paired speedup) or unpaired (the eager cell's "
    "J/step / own, the interval of the two cells' draws), beside the time speedup (the per-cell table's). "
    "A paired ratio is not corrected for its blocks' edges: the bookkeeping between blocks is charged to "
    "the next block of either side, pulling the ratio toward 1 by at most (edges ≤ x%: that time's share of "
    "the compiled blocks, median over runs) x of (ratio − 1), and a reading up to an update (0.1 s) stale "
    "moves energy between blocks of the two sides where they draw different power (docs/measurement.md, "
    "Energy). "
    "Break-even: compile kJ (the energy of a cold compile where a run compiled cold; marked (warm) where "
    "it found an earlier compile's cache entries: a later run, a later cell of a packed task, or "
    "compile.measure=cold_warm, whose cold compile has no energy reading) / the joules saved per step, never "
    "where compiling saves none; kJ: the eager run's energy over those steps (what the compile and the "
    "compiled steps then spent too)."
)


def _break_even(rows: pd.DataFrame, column: str, scale: float, whole: bool) -> list[str]:
    return [
        fmt_warm(fmt_break_even(v / scale, ok, whole), warm if ok is True else None)
        for v, ok, warm in zip(rows[column], rows["energy_pays_off"], rows["compile_energy_warm"])
    ]


def _flagged(texts: list[str], flags: pd.Series, why: pd.Series | str) -> list[str]:
    """Each text with `(why)` after it where its flag is true (and the text not empty)."""
    whys = why if isinstance(why, pd.Series) else pd.Series(why, index=flags.index)
    return [f"{t} ({w})" if t and not is_null(f) and bool(f) else t for t, f, w in zip(texts, flags, whys)]


def _cells(metrics: pd.DataFrame) -> Table:
    """A row per completed cell with a J/step, in the per-cell table's order."""
    rows = metrics[(metrics["status"] == COMPLETED) & metrics["joules_per_step"].notna()]
    data = rows[["cell_id", *SPEEDUP, *ENERGY_COLUMNS]].assign(backend=backend_labels(rows))
    interval = lambda name: [fmt_interval(*v) for v in rows[[name, f"{name}_low", f"{name}_high"]].values]  # noqa: E731
    short = rows["energy_window_updates"] < MIN_WINDOW_UPDATES
    updates = rows["energy_window_updates"].map(lambda n: f"short: {n:.0f} updates")
    edges = rows["energy_edge_bias"].map(lambda share: f"edges ≤ {share:.1%}")
    ratios = [fmt_speedup(*v) for v in rows[["energy_ratio", "energy_ratio_low", "energy_ratio_high"]].values]
    text = pd.DataFrame({
        "cell": rows["cell_id"], "workload": workload_labels(rows).str.replace("\n", " "),
        "backend": data["backend"], "J/step [95% CI]": _flagged(interval("joules_per_step"), short, updates),
        "items/J [95% CI]": interval("items_per_joule"),
        "avg W": rows["avg_power_w"].map(fmt_number),
        "idle W": _flagged(rows["idle_power_w"].map(fmt_number).tolist(), rows["idle_settled"] == False,  # noqa: E712
                           "not settled"),
        "speedup [95% CI]": [fmt_speedup(*v) for v in rows[SPEEDUP[:3]].values],
        "energy ratio [95% CI]": _flagged(
            _flagged(ratios, rows["energy_short_window"], "short window"),
            rows["energy_edge_bias"].notna(), edges,
        ),
        "vs eager": rows["energy_method"].fillna(""),
        "compile kJ": [fmt_warm(fmt_number(j / 1e3), warm) for j, warm in
                       zip(rows["compile_energy_j"], rows["compile_energy_warm"])],
        "break-even steps": _break_even(rows, "energy_break_even_steps", 1.0, whole=True),
        "break-even kJ": _break_even(rows, "energy_break_even_j", 1e3, whole=False),
    })  # fmt: skip
    return Table(ENERGY, "Energy per step and what compiling saves of it", data, text, NOTE)


def _backends(metrics: pd.DataFrame) -> Table:
    """Per compiled backend, over its cells with an energy ratio: the geometric-mean energy ratio and
    time speedup."""
    compiled = metrics[
        (metrics["backend"] != BASELINE_BACKEND)
        & metrics["energy_ratio"].notna()
        & (metrics["energy_short_window"] != True)  # noqa: E712 - short windows decide nothing
    ]
    rows = []
    for label, cells in compiled.groupby(backend_labels(compiled), sort=True):
        energy, covered = geometric_mean(cells["energy_ratio"].to_numpy(float))
        rows.append({
            "backend": label, "cells": covered, "geomean_energy_ratio": energy,
            "geomean_speedup": geometric_mean(cells["speedup"].to_numpy(float))[0],
            "saves_energy": int((cells["energy_ratio_low"] > 1).sum()),
            "costs_energy": int((cells["energy_ratio_high"] < 1).sum()),
        })  # fmt: skip
    data = pd.DataFrame(rows, columns=["backend", "cells", "geomean_energy_ratio", "geomean_speedup",
                                       "saves_energy", "costs_energy"])  # fmt: skip
    text = pd.DataFrame({
        "backend": data["backend"], "cells": data["cells"].astype(str),
        "geomean energy ratio": data["geomean_energy_ratio"].map(fmt_speedup),
        "geomean speedup": data["geomean_speedup"].map(fmt_speedup),
        "saves energy": data["saves_energy"].astype(str), "costs energy": data["costs_energy"].astype(str),
    })  # fmt: skip
    note = (
        "Over each compiled backend's cells with an energy ratio (eager J/step / own, paired where "
        f"measured) from windows of {MIN_WINDOW_UPDATES} counter updates or more: its geometric mean, "
        "and the time speedup's over the same cells. Saves energy: cells "
        "whose ratio's 95% interval lies above 1; costs energy: below 1."
    )
    return Table(ENERGY_BACKENDS, "Energy ratio over eager per backend", data, text, note)


def energy_tables(metrics: pd.DataFrame) -> list[Table]:
    """The per-cell energy table and the per-backend one; none where no cell has a J/step."""
    if not np.isfinite(metrics["joules_per_step"].to_numpy(float)).any():
        return []
    backends = _backends(metrics)
    return [_cells(metrics), *([backends] if len(backends.data) else [])]


class Energy(Study):
    """Energy per step and what compiling saves of it, where some cell measured its energy; the
    figure of J/step against the step time."""

    def tables(self, loaded: Loaded) -> list[Table]:
        return energy_tables(loaded.training)

    def figures(self, loaded: Loaded) -> Iterator[tuple[str, Figure]]:
        from analysis.studies.energy.figure import NAME, energy_figure  # matplotlib: only when plotting

        done = loaded.training[loaded.training["status"] == COMPLETED]
        if len(loaded.training) and done["joules_per_step"].notna().any():
            yield NAME, energy_figure(loaded.training, loaded.data.steps)
