"""`repeats=auto`'s stop rule: whether a cell's speedup is decided, built from the verdict `analyze`
prints, so that the reason a sweep stopped and the verdict never disagree.

After each round the orchestrator (orchestrator/sweep/rounds.py) asks where each cell still going
stands (analysis/cells/standings.py: its speedup and interval as the per-cell table has them, at the
level `spent_level` gives its round,
the paired one where the cell measured paired, else against its eager cell; the end-to-end one
where data-bound) and `stop_reasons` decides, in this order:

- a cell with a run apart (analysis/statistics/apart.py: its verdict is 'undecided') stops only at
  `max_repeats`: more runs may show the others alike, never a verdict the table would not print;
- a cell with a speedup stops once `equivalence_verdict` (analysis/statistics/verdicts.py) of that
  interval, with the cell's margin (config key `equivalence`), is decided: `decided: faster`,
  `decided: slower` or `decided: no difference`, exactly where the per-cell table says faster,
  slower or no difference with that margin; else once its half-width is at most `measure.rel_ci` x
  the speedup (`precise enough`), or at `max_repeats` replicates (`max_repeats reached`); never
  before MIN_REPLICATES, since one run's interval cannot see how runs differ and two runs' is wide;
- a cell without one (the eager cell) goes on while a cell compared with it, unpaired, goes on (a
  paired cell measures its own eager side), else stops: `its compared cells stopped`, or `no
  speedup to decide` where no cell is compared with it.

Looking again after every round would find a false difference more often than the interval's level
promises (at margin 0 and a 95% interval each round, 9-41% of sweeps with true speedup 1 read faster
or slower). So the error is spent over the looks (`spent_level`): at look N = 3..M (M = max_repeats)
the interval has level 1 - alpha_N, alpha_N = ALPHA (((N-2)/(M-2))^RHO - ((N-3)/(M-2))^RHO), and the
alpha_N sum to ALPHA: by the union bound a cell with no difference reads faster or slower in at most
ALPHA of sweeps, however many looks (Lan & DeMets 1983 spending; measured: docs/measurement.md). The
per-cell table of a repeats=auto cell prints the interval at that level (analysis/cells/metrics.py).

Decisions rest on the files alone (each cell's config.yaml and results), and each cell's bootstrap is
seeded by its id: a sweep run again decides as it did.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from analysis.statistics.verdicts import EQUIVALENCE, equivalence_verdict

#: The fewest replicates before a cell may stop: an interval over runs needs two, and two runs' t
#: interval (1 degree of freedom, t = 12.7) is too wide to decide anything but a large difference.
MIN_REPLICATES = 3
#: The error spent over all looks of a repeats=auto cell, and the spending function's power: RHO > 1
#: keeps more for later looks, whose intervals have more degrees of freedom (chosen by simulation,
#: docs/measurement.md "Stopping").
ALPHA, RHO = 0.05, 2.0
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
    equivalence: float = EQUIVALENCE
    rel_ci: float | None = None
    speedup: tuple[float, float, float] | None = None
    """(speedup, low, high) of its interval at `spent_level`; None for a cell without one (the eager cell)."""
    baseline: str | None = None
    """The eager cell its speedup is against where unpaired (it needs that cell's runs)."""
    against: int | None = None
    """The eager cell's runs its unpaired speedup rests on now (its stop record keeps them)."""
    apart: str | None = None
    """A run its interval rests on that stands apart (`run 5 is 12% above the others`), or None."""


def spent_level(replicates: np.ndarray, max_repeats: np.ndarray, rho: float = RHO) -> np.ndarray:
    """The level of a repeats=auto cell's interval at look N = `replicates` (module doc): 1 - alpha_N
    for MIN_REPLICATES <= N <= max_repeats, else 1 - ALPHA (no look there). `rho`: the spending
    function's power (RHO; another only to compare them, tests/unit/analysis/test_simulation.py)."""
    n, m = np.asarray(replicates, dtype=float), np.asarray(max_repeats, dtype=float)
    looks = np.maximum(m - (MIN_REPLICATES - 1), 1)
    spent = lambda k: ALPHA * np.clip(k / looks, 0, 1) ** rho  # noqa: E731
    alpha = spent(n - (MIN_REPLICATES - 1)) - spent(n - MIN_REPLICATES)
    return np.where((n >= MIN_REPLICATES) & (n <= m), 1 - alpha, 1 - ALPHA)


def decisions(
    speedup: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    replicates: np.ndarray,
    max_repeats: np.ndarray,
    equivalence: np.ndarray | float,
    rel_ci: np.ndarray | float = np.nan,
    apart: np.ndarray | bool = False,
) -> np.ndarray:
    """Why each cell with a speedup (and its interval at `spent_level`) stops now, None to go on
    (module doc), vectorised over cells: `stop_reasons` and the stopping simulation
    (tests/unit/analysis/test_simulation.py) decide through it. `rel_ci`: NaN for none; `apart`:
    whether a run of the cell stands apart (then only `max_repeats` stops it)."""
    speedup, low, high = (np.asarray(v, dtype=float) for v in (speedup, low, high))
    replicates, max_repeats = np.asarray(replicates), np.asarray(max_repeats)
    verdict = equivalence_verdict(low, high, np.asarray(equivalence, dtype=float))
    reasons = np.full(speedup.shape, None, dtype=object)
    reasons[replicates >= max_repeats] = MAX_REACHED
    with np.errstate(invalid="ignore"):
        reasons[(high - low) / 2 <= np.asarray(rel_ci, dtype=float) * speedup] = PRECISE
    for name, reason in DECIDED.items():
        reasons[verdict == name] = reason
    reasons[np.broadcast_to(apart, reasons.shape) & (replicates < max_repeats)] = None
    reasons[replicates < MIN_REPLICATES] = None
    return reasons


def stop_reasons(standings: Sequence[Standing]) -> dict[str, str | None]:
    """{cell_id: why it stops now, or None to go on} for the cells still going (module doc)."""
    reasons: dict[str, str | None] = {}
    for standing in standings:
        if standing.speedup is not None:
            reasons[standing.cell_id] = decisions(
                *standing.speedup,
                standing.replicates,
                standing.max_repeats,
                standing.equivalence,
                np.nan if standing.rel_ci is None else standing.rel_ci,
                standing.apart is not None,
            )[()]
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
