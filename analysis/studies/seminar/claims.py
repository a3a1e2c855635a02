"""The seminar report's claims, one per published comparison with eager, checked against our cells.

A claim is what a published table says about a backend against eager for one model: "inductor is
faster than eager for gpt2" (Table 1), "inductor is slower than eager for resnet18" (Table 3).
Our side of it is the cell's verdict (analysis.cells.metrics): the 95% two-level bootstrap interval of the
speedup (ratio of median steps, or a paired cell's median pair ratio: analysis/cells/paired.py; over
replicates, then steps or pairs) says faster when it lies above 1,
slower when below, no difference when it lies within the margin of practical equivalence
(`--equivalence`), and gives no clear difference otherwise; a data-bound cell (or one compared with a
data-bound eager cell) is judged on its end-to-end throughput instead, and says so. With one run of
a cell or of its eager cell the interval is over steps only, and the answer says that run-to-run
noise is not covered. Table 2's orderings are Table 1's (MFU is FLOPs per step over step time and
peak, with equal FLOPs per step for one model), so they are checked through Table 1.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.cells.loaded import Loaded
from analysis.cells.paired import PAIRED
from analysis.rendering.text import Table, fmt_change, fmt_percent, fmt_speedup, is_null
from analysis.statistics.verdicts import E2E_BASIS, EQUIVALENCE, equivalence_verdict
from analysis.studies.base import Study
from analysis.studies.seminar.tables import (
    PUBLISHED_CAVEATS,
    SEMINAR,
    UNIT_SYMBOLS,
    default_mode,
    load_reference,
    seminar_models,
)
from analysis.studies.sweep.speedup_texts import verdict_reasons
from workloads.contract.vocabulary import COMPLETED

AGREES, DISAGREES, NO_DIFFERENCE = "agrees", "disagrees", "no difference"
INCONCLUSIVE, NO_DATA = "inconclusive", "no data"
VERDICT_ORDER = (AGREES, DISAGREES, NO_DIFFERENCE, INCONCLUSIVE, NO_DATA)
COLUMNS = [
    "table",
    "model",
    "backend",
    "claim",
    "published",
    "published_change",
    "cell_id",
    "status",
    "speedup",
    "speedup_low",
    "speedup_high",
    "e2e_speedup",
    "e2e_speedup_low",
    "e2e_speedup_high",
    "basis",
    "replicates",
    "baseline_replicates",
    "ours",
    "verdict",
    "note",
]
#: What our cell's verdict (analysis.statistics.bootstrap.VERDICTS) says, in the claims table's words.
_FOUND = {
    "faster": "faster",
    "slower": "slower",
    "no difference": "no difference",
    "undecided": "no clear difference",
}


def _runs(own: object, baseline: object, unstable: object) -> str:
    """` (1 run: run-to-run noise not covered)`, ` (3 runs)`, ` (3 runs, unstable)`, ` (3 vs 1 runs:
    ...)`: how many runs the interval rests on, of the cell and of its eager cell, and whether the
    cell's runs disagree (analysis.cells.metrics: `unstable`)."""
    own, baseline = (1 if is_null(n) else int(n) for n in (own, baseline))
    runs = f"{own} run{'s' if own > 1 else ''}" if own == baseline else f"{own} vs {baseline} runs"
    if not is_null(unstable) and bool(unstable):
        runs += ", unstable"
    return f" ({runs}: run-to-run noise not covered)" if min(own, baseline) == 1 else f" ({runs})"


def _baseline_runs(cell: pd.Series, replicates: pd.Series) -> object:
    """How many runs the cell's eager side rests on: its own where paired, else its eager cell's."""
    return (
        cell["replicates"] if cell["speedup_method"] == PAIRED else replicates.get(cell["baseline_cell_id"])
    )


def _our_side(
    cell: pd.Series | None, claimed: str, reason: str, baseline_replicates: object, margin: float
) -> dict:
    """What our cell says about a claim, and the verdict."""
    if cell is None:
        return {"ours": "not in the sweep", "verdict": NO_DATA}
    side = {
        "cell_id": cell["cell_id"],
        "status": cell["status"],
        "replicates": cell["replicates"],
        "baseline_replicates": baseline_replicates,
        "basis": cell["verdict_basis"],
        **{
            f"{name}{end}": cell[f"{name}{end}"]
            for name in ("speedup", "e2e_speedup")
            for end in ("", "_low", "_high")
        },
    }
    if cell["status"] != COMPLETED:
        return {**side, "ours": f"no result ({cell['status']})", "verdict": NO_DATA}
    if is_null(cell["speedup"]):
        return {**side, "ours": "no eager cell of the same workload", "verdict": NO_DATA}
    verdict = cell["verdict"]
    if is_null(verdict):  # a point estimate without an interval (steps unreadable: the run row's summary)
        verdict = equivalence_verdict(np.array([cell["speedup"]]), np.array([cell["speedup"]]), margin)[0]
    found = _FOUND[verdict] + (
        f" (within ±{fmt_percent(margin)})" if verdict == "no difference" and margin else ""
    )
    if cell["verdict_basis"] == E2E_BASIS:
        evidence = reason.replace(": end-to-end", ", end-to-end")
    else:
        # 3 digits: 0.998 is not 1
        evidence = (
            ("paired " if cell["speedup_method"] == PAIRED else "")
            + "speedup "
            + fmt_speedup(cell["speedup"], cell["speedup_low"], cell["speedup_high"], digits=3)
        )
    ours = f"{found}: {evidence}{_runs(cell['replicates'], baseline_replicates, cell['unstable'])}"
    if verdict in ("faster", "slower"):
        return {**side, "ours": ours, "verdict": AGREES if verdict == claimed else DISAGREES}
    return {**side, "ours": ours, "verdict": NO_DIFFERENCE if verdict == "no difference" else INCONCLUSIVE}


def check_claims(
    metrics: pd.DataFrame, reference: pd.DataFrame | None = None, margin: float = EQUIVALENCE
) -> pd.DataFrame:
    """One row per claim and matching cell of ours (COLUMNS); a claim without a cell says `no data`.
    `margin`: the margin of practical equivalence the metrics' verdicts were computed with."""
    reference = load_reference() if reference is None else reference
    names = seminar_models(metrics)
    reasons = verdict_reasons(metrics, digits=3)
    replicates = metrics.drop_duplicates("cell_id").set_index("cell_id")["replicates"]
    rows = []
    for (table, model), published in reference[reference["metric"] == "step_time"].groupby(
        ["table", "model"], sort=False
    ):
        eager = published[published["backend"] == "eager"]["mean"].iloc[0]
        unit = UNIT_SYMBOLS[published["unit"].iloc[0]]
        for backend, mean in zip(published["backend"], published["mean"]):
            if backend == "eager":
                continue
            change = mean / eager - 1
            claimed = "faster" if change < 0 else "slower"
            claim = {
                "table": table,
                "model": model,
                "backend": backend,
                "claim": f"{backend} is {claimed} than eager for {model}",
                "published": f"{mean:.3f} vs {eager:.3f} {unit} ({fmt_change(change)})",
                "published_change": change,
                "note": PUBLISHED_CAVEATS.get((table, backend), ""),
            }
            ours = metrics[
                (names == model) & (metrics["backend"] == backend) & metrics["compile_mode"].map(default_mode)
            ]
            # A paired cell's eager side ran in each of its own runs.
            cells = [
                (row, reasons.loc[i], _baseline_runs(row, replicates)) for i, row in ours.iterrows()
            ] or [(None, "", None)]
            rows += [
                {**claim, **_our_side(cell, claimed, reason, base_runs, margin)}
                for cell, reason, base_runs in cells
            ]
    return pd.DataFrame(rows, columns=COLUMNS)


def claims_table(
    metrics: pd.DataFrame, reference: pd.DataFrame | None = None, margin: float = EQUIVALENCE
) -> Table:
    """The claims with our verdicts, as a table."""
    data = check_claims(metrics, reference, margin)
    text = pd.DataFrame({
        "claim (report)": data["claim"], "published": data["published"], "ours": data["ours"],
        "verdict": data["verdict"], "cell": data["cell_id"].fillna(""), "note": data["note"],
    })  # fmt: skip
    counts = data["verdict"].value_counts()
    summary = ", ".join(f"{counts[v]} {v}" for v in VERDICT_ORDER if v in counts)
    within = (
        f"no difference where it lies within ±{fmt_percent(margin)} of 1 (practical equivalence), "
        if margin
        else ""
    )
    note = (
        f"{summary}. Ours: speedup = eager median step / compiled median step (geometric mean over runs) "
        "with its 95% interval over runs (Student-t, Welch's between two cells; with one run, a bootstrap "
        "of its steps within one process: run-to-run noise not covered); a paired speedup: the median of "
        "the cell's pair ratios (eager block / compiled block, alternating in one process), over runs; "
        f"faster or slower only where the interval excludes 1, {within}no clear difference "
        "otherwise. Data-bound cells are judged on end-to-end throughput (items over the measured span). "
        "Table 2 (MFU) orders the backends as Table 1 does, so its claims are Table 1's."
    )
    return Table("seminar_claims", "The report's claims against our data", data, text, note)


class SeminarClaims(Study):
    """`--reference seminar`: the report's claims, each with our verdict."""

    reference = SEMINAR

    def tables(self, loaded: Loaded) -> list[Table]:
        return [claims_table(loaded.training, margin=loaded.equivalence)]
