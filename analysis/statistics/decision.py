"""`repeats=auto`'s stop rule: whether a cell's speedup is decided, built from the verdict `analyze`
prints, so that the reason a sweep stopped and the verdict never disagree.

After each round the orchestrator (orchestrator/sweep/rounds.py) asks where each cell still going
stands (analysis/cells/standings.py: its speedup and 95% interval as the per-cell table has them,
the paired one where the cell measured paired, else against its eager cell; the end-to-end one
where data-bound) and `stop_reasons` decides, in this order:

- a cell with a speedup stops once `equivalence_verdict` (analysis/statistics/verdicts.py) of that
  interval, with the cell's margin (config key `equivalence`), is decided: `decided: faster`,
  `decided: slower` or `decided: no difference`, exactly where the per-cell table says faster,
  slower or no difference with that margin; else once its half-width is at most `measure.rel_ci` x
  the speedup (`precise enough`), or at `max_repeats` replicates (`max_repeats reached`); never
  before MIN_REPLICATES, since one run's interval cannot see how runs differ;
- a cell without one (the eager cell) goes on while a cell compared with it, unpaired, goes on (a
  paired cell measures its own eager side), else stops: `its compared cells stopped`, or `no
  speedup to decide` where no cell is compared with it.

Decisions rest on the files alone (each cell's config.yaml and results), and each cell's bootstrap is
seeded by its id: a sweep run again decides as it did.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from analysis.statistics.verdicts import equivalence_verdict

#: The fewest replicates before a cell may stop: an interval over runs needs two.
MIN_REPLICATES = 2
#: The verdicts that stop a cell, and the stop reason each gives.
DECIDED = {verdict: f"decided: {verdict}" for verdict in ("faster", "slower", "no difference")}
FASTER, SLOWER, NO_DIFFERENCE = DECIDED.values()
PRECISE, MAX_REACHED = "precise enough", "max_repeats reached"
COMPARED_STOPPED, NO_SPEEDUP = "its compared cells stopped", "no speedup to decide"


@dataclass(frozen=True)
class Standing:
    """Where a cell still going stands after a round."""

    cell_id: str
    replicates: int
    """Its completed replicates."""
    max_repeats: int
    equivalence: float = 0.0
    rel_ci: float | None = None
    speedup: tuple[float, float, float] | None = None
    """(speedup, low, high) of its 95% interval; None for a cell without one (the eager cell)."""
    baseline: str | None = None
    """The eager cell its speedup is against where unpaired (it needs that cell's runs)."""


def _decided(standing: Standing) -> str | None:
    """Why a cell with a speedup stops (module doc), None to go on."""
    assert standing.speedup is not None
    speedup, low, high = standing.speedup
    verdict = equivalence_verdict(np.array([low]), np.array([high]), standing.equivalence)[0]
    if verdict in DECIDED:
        return DECIDED[verdict]
    if standing.rel_ci is not None and (high - low) / 2 <= standing.rel_ci * speedup:
        return PRECISE
    return MAX_REACHED if standing.replicates >= standing.max_repeats else None


def stop_reasons(standings: Sequence[Standing]) -> dict[str, str | None]:
    """{cell_id: why it stops now, or None to go on} for the cells still going (module doc)."""
    reasons: dict[str, str | None] = {}
    for standing in standings:
        if standing.speedup is not None:
            reasons[standing.cell_id] = _decided(standing) if standing.replicates >= MIN_REPLICATES else None
    needed = {s.baseline for s in standings if s.speedup is not None and reasons[s.cell_id] is None}
    compared = {s.baseline for s in standings}
    for standing in standings:
        if standing.speedup is not None:
            continue
        if standing.replicates >= standing.max_repeats:
            reasons[standing.cell_id] = MAX_REACHED
        elif standing.replicates < MIN_REPLICATES or standing.cell_id in needed:
            reasons[standing.cell_id] = None
        else:
            reasons[standing.cell_id] = COMPARED_STOPPED if standing.cell_id in compared else NO_SPEEDUP
    return {standing.cell_id: reasons[standing.cell_id] for standing in standings}
