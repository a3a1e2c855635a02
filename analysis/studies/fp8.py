"""fp8 against bf16: each completed fp8 training cell beside its bf16 counterpart, the speedup of fp8.

Precision is a workload axis, so the per-cell tables compare backends within one precision only. Here
an fp8 cell is compared with the cell that differs from it by precision alone: the same workload (model,
size, batch, ... on the same GPU) in bf16, and the same treatment (backend, mode, flags). The speedup is
bf16's median step over fp8's, with the interval the per-cell table's speedups have (Welch's over
runs, or the bootstrap of one run: analysis/cells/uncertainty.py `median_ratio_intervals`). Eager against
eager is one such row: it shows what fp8 costs without a compiler to fuse its casts. GEMM cells have
their own table (analysis/cells/gemm.py); a sweep without an fp8 cell that has a counterpart has no table.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.cells.gemm import BF16, FP8, gemm_mask
from analysis.cells.loaded import Loaded
from analysis.cells.uncertainty import RESAMPLES, median_ratio_intervals
from analysis.reading.axes import SAME_WORKLOAD, backend_labels, reference_positions, workload_labels
from analysis.reading.collect import SweepData
from analysis.rendering.text import Table, fmt_accuracy, fmt_number, fmt_speedup, is_null
from analysis.statistics.verdicts import equivalence_verdict
from analysis.studies.base import Study
from workloads.contract.vocabulary import COMPLETED, TREATMENT, names

FP8_TABLE = "fp8"
#: What an fp8 cell shares with its bf16 counterpart: everything but the precision (and fp8's recipe).
WORKLOAD_AXES = [a for a in SAME_WORKLOAD if a not in ("precision", "fp8_recipe")]
COUNTERPART = [*WORKLOAD_AXES, *names(TREATMENT)]
#: The fp8 cell's run row: Linear layers swapped for Float8Linear, and left in bf16 (and why).
LINEAR_COLUMNS = ["fp8_linears", "fp8_skipped_head", "fp8_skipped_misaligned"]
SPEEDUP = ["speedup", "speedup_low", "speedup_high"]
ACCURACY_COLUMNS = ["accuracy", "accuracy_rel_diff", "accuracy_noise_floor"]


def fp8_rows(
    data: SweepData, metrics: pd.DataFrame, equivalence: float, resamples: int = RESAMPLES
) -> pd.DataFrame:
    """One row per completed fp8 training cell with a completed bf16 counterpart, in the per-cell
    table's order (empty without any): its axes, both median steps, the speedup bf16 / fp8 with its 95%
    interval, the verdict against `equivalence`, its accuracy check and its Linear layers' counts."""
    cells = metrics[~gemm_mask(metrics) & metrics["precision"].isin([BF16, FP8])].reset_index(drop=True)
    counterpart = reference_positions(cells, COUNTERPART, cells["precision"] == BF16)
    fp8 = np.flatnonzero(
        (cells["precision"] == FP8).to_numpy()
        & (cells["status"] == COMPLETED).to_numpy()
        & cells["median_step_ms"].notna().to_numpy()
        & (counterpart >= 0)
    )
    if not len(fp8):
        return pd.DataFrame()
    bf16 = counterpart[fp8]
    low, high = median_ratio_intervals(cells, data.steps, bf16, fp8, resamples)
    ours = cells.iloc[fp8].reset_index(drop=True)
    rows = ours[["cell_id", "status", *COUNTERPART, "fp8_recipe", *ACCURACY_COLUMNS]].rename(
        columns={"cell_id": "fp8_cell_id"}
    )
    rows.insert(1, "bf16_cell_id", cells["cell_id"].to_numpy()[bf16])
    rows["bf16_ms"] = cells["median_step_ms"].to_numpy(float)[bf16]
    rows["fp8_ms"] = ours["median_step_ms"].to_numpy(float)
    rows["speedup"], rows["speedup_low"], rows["speedup_high"] = rows["bf16_ms"] / rows["fp8_ms"], low, high
    rows["verdict"] = equivalence_verdict(low, high, equivalence)
    linears = data.cells.drop_duplicates("cell_id").set_index("cell_id")[LINEAR_COLUMNS]
    rows[LINEAR_COLUMNS] = linears.reindex(rows["fp8_cell_id"]).to_numpy(float)
    rows[LINEAR_COLUMNS] = rows[LINEAR_COLUMNS].astype("Int64")  # counts: 24 in the CSV, not 24.0
    return rows


def _linears(converted: object, head: object, misaligned: object) -> str:
    """`48 (+1 head, +2 misaligned)`: the Linear layers in fp8, and those left in bf16 and why."""
    if is_null(converted):
        return ""
    skipped = [
        f"+{int(n)} {why}" for n, why in ((head, "head"), (misaligned, "misaligned")) if not is_null(n) and n
    ]
    return f"{int(converted)} ({', '.join(skipped)})" if skipped else str(int(converted))


def fp8_table(data: SweepData, metrics: pd.DataFrame, equivalence: float) -> Table | None:
    """The fp8 cells against their bf16 counterparts (`fp8_rows`) as a table; None without any."""
    rows = fp8_rows(data, metrics, equivalence)
    if rows.empty:
        return None
    text = pd.DataFrame({
        # As the per-cell table names it, on one line: model and size, then what differs between these rows.
        "workload": workload_labels(rows, WORKLOAD_AXES).str.replace("\n", " "),
        "backend": backend_labels(rows), "recipe": rows["fp8_recipe"].fillna(""),
        "bf16 ms": rows["bf16_ms"].map(fmt_number), "fp8 ms": rows["fp8_ms"].map(fmt_number),
        "bf16 / fp8 [95% CI]": [fmt_speedup(*v) for v in rows[SPEEDUP].values],
        "fp8 is": rows["verdict"].fillna(""),
        "accuracy": [fmt_accuracy(*v) for v in rows[ACCURACY_COLUMNS].values],
        "fp8 linears": [_linears(*v) for v in rows[LINEAR_COLUMNS].values],
        "fp8 cell": rows["fp8_cell_id"], "bf16 cell": rows["bf16_cell_id"],
    })  # fmt: skip
    margin = f"±{100 * equivalence:g}%" if equivalence else "none"
    note = (
        "bf16 / fp8: the median step of the bf16 cell with the same workload (all but the precision and "
        "the recipe), the same backend, mode and flags on the same GPU, over the fp8 cell's; above 1 fp8 is "
        "faster. Its 95% interval is the ratio's, draw by draw, of the two cells' two-level bootstrap draws "
        "of the median step (replicates with replacement, then each replicate's steps), the draws of the "
        "per-cell table's speedups; `fp8 is` reads it as that table's verdict does, on the median step, "
        f"against the equivalence margin ({margin}). Eager rows show fp8 without a compiler to fuse its "
        "casts and scales. Accuracy: the fp8 cell's own check; fp8 linears: the Linear layers swapped for "
        "Float8Linear (+ those left in bf16: the output head, dimensions not divisible by 16)."
    )
    return Table(FP8_TABLE, "fp8 against bf16: speedup of the same cell in fp8", rows, text, note)


class Fp8AgainstBf16(Study):
    """fp8 training cells against their bf16 counterparts, where a sweep has such pairs."""

    def tables(self, loaded: Loaded) -> list[Table]:
        table = fp8_table(loaded.data, loaded.training, loaded.equivalence)
        return [table] if table else []
