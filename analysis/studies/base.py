"""The seam between a loaded sweep and what the report shows of it: a `Study` and what it is given.

`report.analyze` reads the sweep once into a `Loaded` (its files, one metrics row per cell, the
settings the verdicts were drawn with) and asks every study of the one list
(analysis/studies/registry.py), in its order, for its tables; `report.write_report` asks them for
their figures, only when it plots. A study that has nothing to show for a sweep (no energy, no GEMM
cells, no suite) returns none: the report has no branch for it. A study that judges a publication's
claims names its `--reference` and runs only when asked for it. A new study is one subclass, added
to the list.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from analysis.cells.gemm import gemm_cells, gemm_mask
from analysis.cells.gemm_layer import layer_cells
from analysis.reading.collect import SweepData
from analysis.rendering.text import Table

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass
class Loaded:
    """One sweep read and measured: what every study starts from."""

    sweep_dir: Path
    data: SweepData
    metrics: pd.DataFrame
    """One row per cell (analysis/cells/metrics.py), GEMM cells included."""
    equivalence: float
    """The margin of practical equivalence the verdicts were drawn with (0: none)."""
    data_bound: float
    launch_bound: float
    reference: str | None = None
    """The publication asked for (`--reference`), or None."""

    @cached_property
    def training(self) -> pd.DataFrame:
        """The metrics of the training cells: GEMM cells time one matrix multiply, not a step."""
        return self.metrics[~gemm_mask(self.metrics)]

    @cached_property
    def gemm(self) -> pd.DataFrame:
        """The GEMM cells' rows (analysis/cells/gemm.py), layer cells not among them; empty without any."""
        return gemm_cells(self.data, self.metrics)

    @cached_property
    def gemm_layers(self) -> pd.DataFrame:
        """The layer cells' rows (analysis/cells/gemm_layer.py), empty without any."""
        return layer_cells(self.data, self.metrics)


class Study:
    """Turns one loaded sweep into tables and figures; this base has none."""

    #: The `--reference` that asks for this study (a publication's claims judged); None: every sweep.
    reference: str | None = None

    def tables(self, loaded: Loaded) -> list[Table]:
        """The study's tables, in the report's order; none where the sweep has nothing for it."""
        return []

    def figures(self, loaded: Loaded) -> Iterator[tuple[str, Figure]]:
        """(name, figure) pairs, each built as it is asked for (matplotlib is imported here, so that
        a report without figures never pays for it)."""
        return iter(())
