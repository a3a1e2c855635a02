"""The seam between a loaded sweep and what the report shows of it: a `Study` and what it is given.

`report.analyze` opens the sweep once into a `Loaded` (analysis/cells/loaded.py `open_sweep`: its
files, one metrics row per cell, the settings the verdicts were drawn with) and asks every study of
the one list (analysis/studies/registry.py), in its order, for its tables; `report.write_report` asks them for
their figures, only when it plots. A study that has nothing to show for a sweep (no energy, no GEMM
cells, no suite) returns none: the report has no branch for it. A study that judges a publication's
claims names its `--reference` and runs only when asked for it. A new study is one subclass, added
to the list.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from analysis.cells.loaded import Loaded
from analysis.rendering.text import Table

if TYPE_CHECKING:
    from matplotlib.figure import Figure


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
