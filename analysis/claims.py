"""The seminar report's claims, one per published comparison with eager, checked against our cells.

A claim is what a published table says about a backend against eager for one model: "inductor is
faster than eager for gpt2" (Table 1), "inductor is slower than eager for resnet18" (Table 3).
Our side of it is the speedup's 95% bootstrap interval (ratio of median step times): faster when
the interval lies above 1, slower when below, no clear difference when it holds 1. Table 2's
orderings are Table 1's (MFU is FLOPs per step over step time and peak, with equal FLOPs per step
for one model), so they are checked through Table 1.
"""

from __future__ import annotations

import pandas as pd

from analysis.render import Table, fmt_change, fmt_speedup, is_null
from analysis.seminar import PUBLISHED_CAVEATS, UNIT_SYMBOLS, default_mode, load_reference, seminar_models

AGREES, DISAGREES, INCONCLUSIVE, NO_DATA = "agrees", "disagrees", "inconclusive", "no data"
COLUMNS = ["table", "model", "backend", "claim", "published", "published_change", "cell_id", "status",
           "speedup", "speedup_low", "speedup_high", "ours", "verdict", "note"]


def _direction(speedup: float, low: float, high: float) -> str | None:
    """faster, slower, or None (no clear difference); the point estimate where there is no interval."""
    if is_null(low) or is_null(high):
        low = high = speedup
    if low > 1:
        return "faster"
    if high < 1:
        return "slower"
    return None


def _our_side(cell: pd.Series | None, claimed: str) -> dict:
    """What our cell says about a claim, and the verdict."""
    if cell is None:
        return {"ours": "not in the sweep", "verdict": NO_DATA}
    side = {"cell_id": cell["cell_id"], "status": cell["status"], "speedup": cell["speedup"],
            "speedup_low": cell["speedup_low"], "speedup_high": cell["speedup_high"]}
    if cell["status"] != "completed":
        return {**side, "ours": f"no result ({cell['status']})", "verdict": NO_DATA}
    if is_null(cell["speedup"]):
        return {**side, "ours": "no eager cell of the same workload", "verdict": NO_DATA}
    found = _direction(cell["speedup"], cell["speedup_low"], cell["speedup_high"])
    speedup = fmt_speedup(cell["speedup"], cell["speedup_low"], cell["speedup_high"], digits=3)  # 0.998 is not 1
    ours = f"{found or 'no clear difference'}: speedup {speedup}"
    verdict = INCONCLUSIVE if found is None else AGREES if found == claimed else DISAGREES
    return {**side, "ours": ours, "verdict": verdict}


def check_claims(metrics: pd.DataFrame, reference: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per claim and matching cell of ours (COLUMNS); a claim without a cell says `no data`."""
    reference = load_reference() if reference is None else reference
    names = seminar_models(metrics)
    rows = []
    for (table, model), published in reference[reference["metric"] == "step_time"].groupby(["table", "model"],
                                                                                          sort=False):
        eager = published[published["backend"] == "eager"]["mean"].iloc[0]
        unit = UNIT_SYMBOLS[published["unit"].iloc[0]]
        for backend, mean in zip(published["backend"], published["mean"]):
            if backend == "eager":
                continue
            change = mean / eager - 1
            claimed = "faster" if change < 0 else "slower"
            claim = {"table": table, "model": model, "backend": backend,
                     "claim": f"{backend} is {claimed} than eager for {model}",
                     "published": f"{mean:.3f} vs {eager:.3f} {unit} ({fmt_change(change)})",
                     "published_change": change, "note": PUBLISHED_CAVEATS.get((table, backend), "")}
            ours = metrics[(names == model) & (metrics["backend"] == backend)
                           & metrics["compile_mode"].map(default_mode)]
            cells = [row for _, row in ours.iterrows()] or [None]
            rows += [{**claim, **_our_side(cell, claimed)} for cell in cells]
    return pd.DataFrame(rows, columns=COLUMNS)


def claims_table(metrics: pd.DataFrame, reference: pd.DataFrame | None = None) -> Table:
    """The claims with our verdicts, as a table."""
    data = check_claims(metrics, reference)
    text = pd.DataFrame({
        "claim (report)": data["claim"], "published": data["published"], "ours": data["ours"],
        "verdict": data["verdict"], "cell": data["cell_id"].fillna(""), "note": data["note"],
    })  # fmt: skip
    counts = data["verdict"].value_counts()
    summary = ", ".join(f"{counts[v]} {v}" for v in (AGREES, DISAGREES, INCONCLUSIVE, NO_DATA) if v in counts)
    note = (f"{summary}. Ours: speedup = eager median step / compiled median step with its 95% bootstrap "
            "interval; faster or slower only where the interval excludes 1. Table 2 (MFU) orders the "
            "backends as Table 1 does, so its claims are Table 1's.")
    return Table("seminar_claims", "The report's claims against our data", data, text, note)
