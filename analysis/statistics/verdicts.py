"""Verdicts: what a cell's speedup interval says against a margin of equivalence, and on what interval it
rests (the median step's, the paired one where measured; end-to-end where the cell or its eager cell
waits for data), as values; the words are the tables' (analysis/studies/sweep/speedup_texts.py). An
interval's reading: `equivalence_verdict`; the method: docs/analysis.md ("The tables").
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from workloads.contract.vocabulary import COMPLETED, EQUIVALENCE

#: Above this share of step time spent waiting for data a cell is data-bound (`--data-bound`).
DATA_BOUND = 0.10
#: What a verdict rests on: the median-step speedup's interval, or the end-to-end one.
MEDIAN_BASIS, E2E_BASIS = "median step", "end-to-end"


#: What an interval of a ratio (baseline / compiled) says, see `equivalence_verdict`.
VERDICTS = ("faster", "slower", "no difference", "undecided")


def equivalence_verdict(
    low: np.ndarray, high: np.ndarray, margin: np.ndarray | float = EQUIVALENCE
) -> np.ndarray:
    """Per speedup interval (low, high), in this order: 'no difference' when it lies within
    [1 - margin, 1 + margin] (ends included), 'faster' when low > 1, 'slower' when high < 1,
    'undecided' otherwise; None where an end is NaN.

    This is the interval form of an equivalence test (TOST, Schuirmann 1987; Lakens 2017): the
    difference is negligible when the interval excludes every change larger than the margin, and
    it is a difference when the interval excludes 1. Equivalence comes first, so a real but
    negligible change (e.g. 1.005 to 1.01 at a 2% margin) reads 'no difference'. A 95% interval
    inside the margin is TOST at 2.5% per side, a little stricter than the usual 90% interval.
    An interval too wide for either answer is 'undecided': measure more, not "no difference".
    """
    low, high = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
    verdict = np.full(low.shape, "undecided", dtype=object)
    verdict[high < 1] = "slower"
    verdict[low > 1] = "faster"
    verdict[(low >= 1 - margin) & (high <= 1 + margin)] = "no difference"
    verdict[np.isnan(low) | np.isnan(high)] = None
    return verdict


def verdicts(
    cells: pd.DataFrame, compared: np.ndarray, base: np.ndarray, data_bound: float, equivalence: float
) -> None:
    """`data_bound`, and each compared cell's verdict with what it rests on: the end-to-end interval
    where the cell or its baseline is data-bound, else the speedup's (the paired one where measured).
    The baseline itself and cells without an interval have none; a cell with a run apart (column
    `runs_apart`, analysis/statistics/apart.py) is 'undecided'."""
    share = cells["data_wait_share"].to_numpy(float)
    bound = (cells["status"] == COMPLETED).to_numpy() & (np.nan_to_num(share, nan=0.0) > data_bound)
    cells["data_bound"] = bound
    e2e = compared & (bound | ((base >= 0) & bound[np.maximum(base, 0)]))
    low = np.where(e2e, cells["e2e_speedup_low"], cells["speedup_low"]).astype(float)
    high = np.where(e2e, cells["e2e_speedup_high"], cells["speedup_high"]).astype(float)
    verdict = equivalence_verdict(low, high, equivalence)
    verdict[cells["runs_apart"].notna().to_numpy() & pd.notna(verdict)] = "undecided"
    verdict[~compared] = None
    cells["verdict"] = verdict
    cells["verdict_basis"] = np.where(pd.isna(verdict), None, np.where(e2e, E2E_BASIS, MEDIAN_BASIS))


def decisive_speedup(cells: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    """The speedup each cell's verdict rests on, with its 95% interval (columns value, low, high),
    and whether that is the end-to-end one (data-bound cells, or data-bound eager cells)."""
    e2e = cells["verdict_basis"] == E2E_BASIS
    pick = lambda end: cells[f"e2e_speedup{end}"].where(e2e, cells[f"speedup{end}"])  # noqa: E731
    return pd.DataFrame({"value": pick(""), "low": pick("_low"), "high": pick("_high")}), e2e
