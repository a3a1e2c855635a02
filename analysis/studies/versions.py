"""The version table: one workload across the sweep's software environments (`environment=a,b,...`),
and what changed from each environment to the next (method: docs/analysis.md, "Software versions").

A cell across environments is its cell without the environment: the same workload and the same
treatment (backend, mode, flags). Per such cell and environment: its eager cell's median step (the
eager cell of the same workload in the same environment), its own, its speedup as the per-cell table
has it, its cold compile seconds (analysis/cells/breakeven.py), graph breaks and status. Per pair of
neighbouring environments, in the order the sweep lists them (the manifest's, which is the order of
`environment=a,b,...`): old step / new step of the eager and of the compiled cell with the per-cell
table's interval (`median_ratio_intervals`) and the per-cell table's reading of it
(`equivalence_verdict`, against the sweep's margin), so that `faster` here and there is one rule;
old / new cold compile seconds, Welch's interval over the cells' cold replicates where both have 2;
new / old speedup (`_speedup_change`); and a cell that completed in one environment and not in the next.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.cells.breakeven import compile_warmth
from analysis.cells.loaded import Loaded
from analysis.cells.paired import PAIRED, UNPAIRED, paired_ratio_intervals
from analysis.cells.uncertainty import (
    RESAMPLES,
    SEED,
    Draws,
    across_runs,
    median_ratio_intervals,
    median_samples,
)
from analysis.reading.axes import (
    SAME_WORKLOAD,
    axis_rows,
    axis_text,
    backend_labels,
    reference_positions,
    workload_labels,
)
from analysis.reading.collect import SweepData
from analysis.rendering.text import Table, fmt_count, fmt_number, fmt_speedup, fmt_warm, is_null
from analysis.statistics.bootstrap import percentile_interval
from analysis.statistics.intervals import RunLogs, welch_interval, welch_product_interval
from analysis.statistics.verdicts import equivalence_verdict
from analysis.studies.base import Study
from workloads.contract.sweep_dir import read_manifest
from workloads.contract.vocabulary import BASELINE_BACKEND, COMPLETED, TREATMENT, names

VERSIONS_TABLE, CHANGES_TABLE = "versions", "version_changes"
ENVIRONMENT = "environment"
#: What a cell shares with itself in another environment: everything but the environment.
WORKLOAD_AXES = [axis for axis in SAME_WORKLOAD if axis != ENVIRONMENT]
ACROSS = [*WORKLOAD_AXES, *names(TREATMENT)]
#: How an interval of old / new compile seconds reads (`equivalence_verdict`: above 1 the new is quicker).
COMPILE_WORDS = {
    "faster": "cheaper",
    "slower": "dearer",
    "no difference": "no difference",
    "undecided": "undecided",
}
#: ... and of new speedup / old (`faster`: above 1, the new environment's speedup is the larger).
SPEEDUP_WORDS = {
    "faster": "larger",
    "slower": "smaller",
    "no difference": "no difference",
    "undecided": "undecided",
}
NEWLY_FAILING, NEWLY_WORKING = "newly failing", "newly working"
#: How the table names what a change of speedup rests on (`_speedup_change`).
METHOD_TEXTS = {PAIRED: " paired", UNPAIRED: " 4 cells"}


def environment_order(sweep_dir: Path, environments: pd.Series) -> list[str]:
    """The sweep's environments in the order it lists them (their first cells in the manifest), those
    the manifest does not have after them by name."""
    named = set(environments.dropna().astype(str))
    manifest = read_manifest(sweep_dir, warn=None)
    listed = [] if manifest is None or ENVIRONMENT not in manifest else manifest[ENVIRONMENT].dropna()
    order = [name for name in dict.fromkeys(map(str, listed)) if name in named]
    return order + sorted(named - set(order))


def _cold_compile_logs(data: SweepData, cell_ids: pd.Series) -> RunLogs:
    """Per cell of `cell_ids`, the logs of its completed replicates' compile seconds that were not
    warm (`compile_warmth`: cold, or unrecorded in sweeps before the cache counters)."""
    done = data.replicates[data.replicates["status"] == COMPLETED]
    cold = done[~compile_warmth(done).eq(True).to_numpy(bool)]
    code = pd.Index(cell_ids).get_indexer(cold["cell_id"])
    keep = code >= 0
    seconds = pd.to_numeric(cold["compile_time_s"], errors="coerce").to_numpy(float)
    return RunLogs.from_values(code[keep], seconds[keep], len(cell_ids))


def _cell_keys(rows: pd.DataFrame) -> list[str]:
    """Per row, its cell across environments: its ACROSS axes as text, where a cell that failed before
    it ran (its architecture, batch or device unknown: null) takes the one cell that agrees with it on
    every axis it knows."""
    texts = [[axis_text(value) for value in values] for values in axis_rows(rows, ACROSS)]
    keys = ["\x1f".join(text) for text in texts]
    known = dict(zip(keys, texts))
    for i, text in enumerate(texts):
        if "" in text:
            matches = {
                key
                for key, other in known.items()
                if key != keys[i] and all(mine in ("", theirs) for mine, theirs in zip(text, other))
            }
            keys[i] = matches.pop() if len(matches) == 1 else keys[i]
    return keys


def version_rows(data: SweepData, metrics: pd.DataFrame, order: list[str]) -> pd.DataFrame:
    """One row per compiled cell of a named environment (empty where fewer than two environments):
    its axes, `eager_position` and `position` in `metrics` (reset), the eager and compiled median
    steps, speedup with interval, cold compile seconds (and whether warm), graph breaks and status;
    ordered by cell, then environment in `order`."""
    cells = metrics.reset_index(drop=True)
    named = cells[ENVIRONMENT].isin(order)
    if len(order) < 2 or not named.any():
        return pd.DataFrame()
    eager = reference_positions(cells, SAME_WORKLOAD, cells["backend"] == BASELINE_BACKEND)
    compiled = np.flatnonzero((named & (cells["backend"] != BASELINE_BACKEND)).to_numpy())
    rows = cells.iloc[compiled][["cell_id", "status", ENVIRONMENT, *ACROSS]].copy()
    rows["position"], rows["eager_position"] = compiled, eager[compiled]
    step = cells["median_step_ms"].to_numpy(float)
    rows["eager_ms"] = np.where(
        rows["eager_position"] >= 0, step[np.maximum(rows["eager_position"], 0)], np.nan
    )
    columns = ["median_step_ms", "speedup", "speedup_low", "speedup_high", "graph_break_count"]
    rows[columns] = cells.iloc[compiled][columns].to_numpy(float)
    rows["speedup_method"] = cells["speedup_method"].to_numpy(object)[compiled]
    rows["compile_s"] = cells["break_even_compile_s"].to_numpy(float)[compiled]
    rows["compile_warm"] = cells["break_even_compile_warm"].to_numpy(object)[compiled]
    rows["_cell"] = _cell_keys(rows)
    rows["_order"] = rows[ENVIRONMENT].map({name: i for i, name in enumerate(order)})
    first = rows.drop_duplicates("_cell")["_cell"]
    rows["_first"] = rows["_cell"].map({key: i for i, key in enumerate(first)})
    return rows.sort_values(["_first", "_order"], kind="stable").reset_index(drop=True)


def _step_change(data: SweepData, cells: pd.DataFrame, old: np.ndarray, new: np.ndarray, margin: float):
    """(old / new median step, low, high, verdict) of the cells at positions old[i], new[i] (-1:
    none); NaN and None where either did not complete with steps."""
    step = cells["median_step_ms"].to_numpy(float)
    ok = (old >= 0) & (new >= 0)
    ok[ok] = np.isfinite(step[old[ok]]) & np.isfinite(step[new[ok]])
    ratio, low, high = (np.full(len(old), np.nan) for _ in range(3))
    if ok.any():
        ratio[ok] = step[old[ok]] / step[new[ok]]
        low[ok], high[ok] = median_ratio_intervals(cells, data.steps, old[ok], new[ok])
    return ratio, low, high, equivalence_verdict(low, high, margin)


def _speedup_change(data: SweepData, cells: pd.DataFrame, a: pd.DataFrame, b: pd.DataFrame, margin: float):
    """(new speedup / old, low, high, verdict, method) per pair. Where both compiled cells are paired
    (PAIRED): the quotient of their paired speedups with `paired_ratio_intervals`, Welch's over their
    per-run median pair ratios (each run's ratio is in one process, so a host's speed between
    processes leaves it). Else (UNPAIRED): (new eager / new compiled) / (old eager / old compiled) of
    the four cells' median steps, Welch's interval over their runs where all four have 2 or more,
    else the percentile interval of their bootstrap draws' same quotient."""
    eager_old, eager_new = a["eager_position"].to_numpy(int), b["eager_position"].to_numpy(int)
    old, new = a["position"].to_numpy(int), b["position"].to_numpy(int)
    step = cells["median_step_ms"].to_numpy(float)
    four = np.stack([eager_new, old, new, eager_old])  # top, top, bottom, bottom
    ok = (four >= 0).all(axis=0)
    ok[ok] = np.isfinite(step[four[:, ok]]).all(axis=0)
    paired = ((a["speedup_method"] == PAIRED) & (b["speedup_method"] == PAIRED)).to_numpy()
    ok &= ~paired
    ratio, low, high = (np.full(len(a), np.nan) for _ in range(3))
    if paired.any():
        ratio[paired] = b["speedup"].to_numpy(float)[paired] / a["speedup"].to_numpy(float)[paired]
        low[paired], high[paired] = paired_ratio_intervals(cells, data.pairs, new[paired], old[paired])
    if ok.any():
        tops, bottoms = four[:2, ok], four[2:, ok]
        ratio[ok] = step[tops].prod(axis=0) / step[bottoms].prod(axis=0)
        samples = median_samples(cells, data.steps)
        runs = RunLogs.of(samples, samples.replicate_medians())
        low[ok], high[ok] = welch_product_interval(
            [runs.take(p) for p in tops], [runs.take(p) for p in bottoms]
        )
        counts = samples.replicates[four[:, ok]]
        boot = np.flatnonzero(ok)[~(across_runs(counts[0], counts[1]) & across_runs(counts[2], counts[3]))]
        if len(boot):
            draws = Draws(cells, samples, RESAMPLES, SEED, np.full(len(cells), 0.95))
            got = [draws.get("median", four[k, boot]) for k in range(4)]
            low[boot], high[boot] = percentile_interval(got[0] * got[1] / (got[2] * got[3]))
    method = np.where(paired, PAIRED, np.where(ok, UNPAIRED, None))
    return ratio, low, high, equivalence_verdict(low, high, margin), method


def change_rows(data: SweepData, metrics: pd.DataFrame, rows: pd.DataFrame, margin: float) -> pd.DataFrame:
    """One row per pair of neighbouring environments of one cell in `version_rows`: old / new of the
    eager step, the compiled step and the cold compile seconds with intervals and verdicts, both
    speedups and the status change (module doc); `row`: the old environment's row of `rows`."""
    if rows.empty:
        return pd.DataFrame()
    cells = metrics.reset_index(drop=True)
    same = (rows["_cell"].to_numpy()[1:] == rows["_cell"].to_numpy()[:-1]).nonzero()[0]
    a, b = rows.iloc[same].reset_index(drop=True), rows.iloc[same + 1].reset_index(drop=True)
    out = a[[*WORKLOAD_AXES, *names(TREATMENT)]].copy()
    out["row"], out["old"], out["new"] = same, a[ENVIRONMENT], b[ENVIRONMENT]
    for side, (old, new) in {
        "eager": (a["eager_position"], b["eager_position"]),
        "compiled": (a["position"], b["position"]),
    }.items():
        change = _step_change(data, cells, old.to_numpy(int), new.to_numpy(int), margin)
        out[side], out[f"{side}_low"], out[f"{side}_high"], out[f"{side}_verdict"] = change
    speedup = _speedup_change(data, cells, a, b, margin)
    out["speedup"], out["speedup_low"], out["speedup_high"], verdict, out["speedup_method"] = speedup
    out["speedup_verdict"] = pd.Series(verdict, dtype=object).map(SPEEDUP_WORDS)
    done_a, done_b = (a["status"] == COMPLETED).to_numpy(), (b["status"] == COMPLETED).to_numpy()
    logs = _cold_compile_logs(data, cells["cell_id"])
    top, bottom = logs.take(a["position"].to_numpy(int)), logs.take(b["position"].to_numpy(int))
    both = done_a & done_b  # a failed cell's compile may have stopped short: not compared
    out["compile"] = np.where(both, a["compile_s"].to_numpy(float) / b["compile_s"].to_numpy(float), np.nan)
    low, high = welch_interval(top, bottom)
    out["compile_low"], out["compile_high"] = np.where(both, low, np.nan), np.where(both, high, np.nan)
    verdict = equivalence_verdict(out["compile_low"], out["compile_high"], margin)
    out["compile_verdict"] = pd.Series(verdict, dtype=object).map(COMPILE_WORDS)
    for end in ("", "_low", "_high"):
        out[f"old_speedup{end}"], out[f"new_speedup{end}"] = a[f"speedup{end}"], b[f"speedup{end}"]
    changed = np.where(done_a & ~done_b, NEWLY_FAILING, np.where(~done_a & done_b, NEWLY_WORKING, ""))
    out["status_change"] = pd.Series(changed, dtype=object).replace("", None)
    out["old_status"], out["new_status"] = a["status"], b["status"]
    return out


def _ratios(frame: pd.DataFrame, column: str, digits: int = 2) -> pd.Series:
    """`1.23x [1.20, 1.26]` of `column` with its `_low` and `_high`, per row."""
    values = frame[[column, f"{column}_low", f"{column}_high"]].to_numpy()
    return pd.Series([fmt_speedup(*v, digits=digits) for v in values], index=frame.index, dtype=object)


def _verdict_text(row: dict) -> str:
    """`eager faster, compiled slower, compile dearer`: the changes decided, or the status change."""
    if not is_null(row["status_change"]):
        return f"{row['status_change']} ({row['old_status']} → {row['new_status']})"
    said = [
        f"{side} {row[f'{side}_verdict']}"
        for side in ("eager", "compiled", "compile", "speedup")
        if row[f"{side}_verdict"] in ("faster", "slower", "cheaper", "dearer", "larger", "smaller")
    ]
    return ", ".join(said) if said else "no change decided"


def version_tables(loaded: Loaded) -> list[Table]:
    """The version table and the neighbouring environments' changes; none without two environments."""
    training = loaded.training.reset_index(drop=True)
    order = environment_order(loaded.sweep_dir, training[ENVIRONMENT])
    rows = version_rows(loaded.data, training, order)
    if rows.empty:
        return []
    compiles = zip(rows["compile_s"], rows["compile_warm"])
    workload = workload_labels(rows, WORKLOAD_AXES).str.replace("\n", " ")
    text = pd.DataFrame({
        "workload": workload, "backend": backend_labels(rows), "environment": rows[ENVIRONMENT],
        "eager ms": rows["eager_ms"].map(fmt_number), "compiled ms": rows["median_step_ms"].map(fmt_number),
        "speedup [95% CI]": _ratios(rows, "speedup"),
        "compile s (cold)": [fmt_warm(fmt_number(s), warm) for s, warm in compiles],
        "graph breaks": rows["graph_break_count"].map(fmt_count), "status": rows["status"],
    })  # fmt: skip
    margin = f"±{100 * loaded.equivalence:g}%" if loaded.equivalence else "none"
    versions = Table(
        VERSIONS_TABLE, "Software environments: each cell in each environment",
        rows.drop(columns=[c for c in rows if c.startswith("_")]), text,
        f"Environments in the order the sweep lists them: {', '.join(order)}. Eager ms: the eager cell of "
        "the same workload in the same environment; speedup as in the per-cell table; compile s: the cold "
        "compile (warm: it hit an earlier compile's cache).",
    )  # fmt: skip
    changes = change_rows(loaded.data, training, rows, loaded.equivalence)
    if changes.empty:
        return [versions]
    text = pd.DataFrame({
        "workload": workload.to_numpy()[changes["row"]],
        "backend": backend_labels(changes), "from → to": changes["old"] + " → " + changes["new"],
        "eager old/new [95% CI]": _ratios(changes, "eager", 3),
        "compiled old/new [95% CI]": _ratios(changes, "compiled", 3),
        "compile s old/new [95% CI]": _ratios(changes, "compile", 3),
        "speedup old → new": _ratios(changes, "old_speedup") + " → " + _ratios(changes, "new_speedup"),
        "speedup new/old [95% CI]": _ratios(changes, "speedup", 3) + changes["speedup_method"].map(
            METHOD_TEXTS
        ).fillna(""),
        "verdict": [_verdict_text(row) for row in changes.to_dict("records")],
    })  # fmt: skip
    note = (
        "Each environment against the one listed before it. old/new: the old environment's median step "
        "(compile seconds) over the new one's, above 1 the new one is quicker; the step's interval is the "
        "per-cell table's (Welch's over runs, else the bootstrap of one run), the compile's Welch's over "
        "the cells' cold replicates (none with one run). A verdict reads the interval as the per-cell "
        f"table does, against the equivalence margin ({margin}): faster / slower where it excludes 1, "
        "no difference inside the margin; compile cheaper / dearer likewise. Speedup new/old (above 1 the "
        "speedup grew): `paired` where both compiled cells are paired, the quotient of their paired "
        "speedups with Welch's interval over their runs' pair ratios (else of their pair-bootstrap draws); "
        "`4 cells` where a side is not, the quotient of the two environments' eager / compiled median "
        "steps with Welch's interval over the four cells' runs (else of their bootstrap draws): larger / "
        "smaller."
    )
    return [
        versions,
        Table(CHANGES_TABLE, "Software environments: what changed from one to the next", changes, text, note),
    ]


class Versions(Study):
    """A sweep over named software environments: its cells per environment, and the changes."""

    def tables(self, loaded: Loaded) -> list[Table]:
        return version_tables(loaded)
