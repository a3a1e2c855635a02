"""How a cell's speedup reads in the per-cell tables: what its interval rests on, what it is against,
its verdict and why in words (analysis/studies/sweep/table.py sets them in the tables)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.cells.uncertainty import WITHIN_ONE_PROCESS
from analysis.rendering.text import fmt_speedup, is_null
from analysis.statistics.verdicts import E2E_BASIS

#: The mark of a paired speedup whose interval is disjoint from the unpaired one's.
DISAGREES = "≠ unpaired"
#: What follows a verdict from one run (its interval within one process): in the full table, and in
#: the compact one, whose note says what it means.
ONE_RUN, ONE_RUN_MARK = " (one run)", "†"


def interval_texts(metrics: pd.DataFrame) -> list[str]:
    """What each speedup's interval rests on: `across 3 runs`, `across 5 runs, 99.4%` at a level other
    than 95% (repeats=auto), `within one process`; '' without one."""
    texts = []
    for interval, level in zip(metrics["interval"], metrics["interval_level"]):
        if is_null(interval):
            texts.append("")
        else:
            spent = not is_null(level) and round(float(level), 6) != 0.95
            texts.append(f"{interval}, {_level(level)}" if spent else str(interval))
    return texts


def _level(level: object) -> str:
    return f"{100 * float(level):.2f}".rstrip("0").rstrip(".") + "%"


def interval_note(metrics: pd.DataFrame, one_run: str = ONE_RUN) -> str:
    """What the intervals of these cells can and cannot see, for the note under the table: one run's
    (within one process; `one_run` marks its verdicts), two runs' (wide), repeats=auto's (at a spent
    level); '' for none of these."""
    lines = []
    has = metrics["interval"].notna()
    one = (metrics["interval"] == WITHIN_ONE_PROCESS).any()
    two = (has & (metrics["interval"] != WITHIN_ONE_PROCESS) & (metrics["replicates"] == 2)).any()
    if one:
        lines.append(
            f"{one_run.strip()}: from one run, a 95% bootstrap interval within one process (or its eager "
            "cell's one run), which cannot see how runs differ; run repeats>=3 for one over runs."
        )
    if two:
        lines.append(
            "2 runs: the interval (Student-t over the runs) is wide because two "
            "runs cannot tell run-to-run spread; run repeats>=3."
        )
    spent = metrics[has & (metrics["interval_level"].round(6) != 0.95)]
    if len(spent):
        at = sorted(
            {(int(n), _level(level)) for n, level in zip(spent["replicates"], spent["interval_level"])}
        )
        lines.append(
            "repeats=auto: intervals at the level its stop rule spent at that run (5% over runs 3 to "
            f"max_repeats): {', '.join(f'{n} runs {level}' for n, level in at)}."
        )
    return " ".join(lines)


def method_texts(metrics: pd.DataFrame) -> list[str]:
    """What each speedup is against: `paired`, `unpaired`, and where the two disagree `paired ≠
    unpaired 1.10x [1.05, 1.15]`; '' without a speedup method (the eager cell itself)."""
    texts = []
    for method, disagrees, *unpaired in zip(
        metrics["speedup_method"],
        metrics["paired_disagrees"],
        metrics["unpaired_speedup"],
        metrics["unpaired_speedup_low"],
        metrics["unpaired_speedup_high"],
    ):
        text = "" if is_null(method) else str(method)
        texts.append(
            f"{text} {DISAGREES} {fmt_speedup(*unpaired)}" if not is_null(disagrees) and disagrees else text
        )
    return texts


def verdict_texts(metrics: pd.DataFrame, reasons: bool = True, one_run: str = ONE_RUN) -> pd.Series:
    """Each cell's verdict as the per-cell table shows it: `faster`, `faster (one run)` (`one_run`)
    where it rests on an interval within one process (run-to-run spread unseen), `baseline` for the
    eager cell the others are compared with, and (`reasons`) for a verdict on end-to-end throughput
    why: `undecided — data-bound (94% waiting for data): end-to-end 1.03x [0.62, 1.71]`."""
    reasons = verdict_reasons(metrics) if reasons else [""] * len(metrics)
    texts = []
    for verdict, reason, cell, baseline, interval in zip(
        metrics["verdict"], reasons, metrics["cell_id"], metrics["baseline_cell_id"], metrics["interval"]
    ):
        if is_null(verdict):
            texts.append("baseline" if cell == baseline else "")
            continue
        single = interval == WITHIN_ONE_PROCESS and verdict != "undecided"
        text = f"{verdict}{one_run}" if single else str(verdict)
        texts.append(f"{text} — {reason}" if reason else text)
    return pd.Series(texts, index=metrics.index, dtype=object)


def verdict_reasons(metrics: pd.DataFrame, digits: int = 2) -> pd.Series:
    """Why a cell with a run apart is undecided (`run 5 is 12% above the others`), or why a verdict
    rests on end-to-end throughput: `data-bound (94% waiting for data): end-to-end 1.03x [0.97, 1.10]`
    (`eager cell data-bound (...)` where it is the baseline that waits); '' for the others."""
    share = metrics.drop_duplicates("cell_id").set_index("cell_id")["data_wait_share"]
    reasons = []
    for row in metrics[
        [
            "verdict_basis",
            "data_bound",
            "data_wait_share",
            "baseline_cell_id",
            "e2e_speedup",
            "e2e_speedup_low",
            "e2e_speedup_high",
            "runs_apart",
        ]
    ].to_dict("records"):
        if not is_null(row["runs_apart"]):
            reasons.append(row["runs_apart"])
            continue
        if row["verdict_basis"] != E2E_BASIS:
            reasons.append("")
            continue
        whose, fraction = (
            ("", row["data_wait_share"])
            if row["data_bound"]
            else ("eager cell ", share.get(row["baseline_cell_id"], np.nan))
        )
        speedup = fmt_speedup(row["e2e_speedup"], row["e2e_speedup_low"], row["e2e_speedup_high"], digits)
        reasons.append(
            f"{whose}data-bound ({100 * float(fraction):.0f}% waiting for data): end-to-end {speedup}"
        )
    return pd.Series(reasons, index=metrics.index, dtype=object)
