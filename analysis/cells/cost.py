"""What each answer cost: the GPU-seconds and joules spent to get a cell's verdict.

A cell spent, over every attempt of every replicate (failed and retried ones too), the time its
process held its devices — from the attempt's start, after its imports and its turn on the device,
to its end, as the run row records them: building, compiling (a cold compile's own process
included), warming up, measuring, the checks after — times its processes (one GPU each; a CPU
cell holds none: null); and the GPU boards' energy from the built cell to the loop's end: its
warm-up windows (compile included) and measured windows (null where none was measured). A verdict
rests on the compiled cell and, unless it is paired on the median step (its eager side ran in its
own process), on the eager cell it is compared with: its cost is the sum of both cells' spending.
An eager cell compared with several backends counts in each of their costs, so the costs of a
table's rows do not add up to the sweep's: `spent_*` do.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.cells.paired import PAIRED
from analysis.rendering.text import fmt_number
from analysis.statistics.verdicts import MEDIAN_BASIS

#: The columns `cost_columns` gives the per-cell metrics: each cell's own spending, and its verdict's.
COST_COLUMNS = ["spent_gpu_s", "spent_j", "cost_gpu_s", "cost_j"]
#: What the per-cell table says of the cost columns.
NOTE = (
    "Cost: what the verdict cost, over every attempt of every replicate, compile included, of the cell and "
    "of the eager cell it rests on (none for a paired one on the median step): GPU-minutes, each "
    "attempt's start to end times its processes, and kJ, the GPU boards' energy from the built cell to "
    "the loop's end: warm-up (compile included) and measuring (not the build, the checks after, nor the "
    "host)."
)
#: The device type whose processes hold a GPU each (a run row records `cuda:0`, `cuda:3`, `cpu`).
GPU_DEVICE = "cuda"


def _spent(cells: pd.DataFrame, attempts: pd.DataFrame) -> pd.DataFrame:
    """Each cell's GPU-seconds and joules over all its attempts (NaN where none is known)."""
    device = attempts["cell_id"].map(cells.drop_duplicates("cell_id").set_index("cell_id")["device"])
    wall_s = (attempts["finished_at"] - attempts["started_at"]).dt.total_seconds()
    processes = pd.to_numeric(attempts["world_size"], errors="coerce").fillna(1)
    # A cell that ended before it ran has no device (NaN, all of a sweep's may be): "" is no GPU.
    on_gpu = device.fillna("").astype(str).str.split(":").str[0] == GPU_DEVICE
    energy = attempts[["energy_j", "warmup_energy_j"]].apply(pd.to_numeric, errors="coerce")
    per_attempt = pd.DataFrame({
        "cell_id": attempts["cell_id"],
        "spent_gpu_s": (wall_s * processes).where(on_gpu).astype(float),
        "spent_j": energy.sum(axis=1, min_count=1).astype(float),
    })  # fmt: skip
    spent = per_attempt.groupby("cell_id").sum(min_count=1)
    return spent.reindex(cells["cell_id"]).reset_index(drop=True)


def cost_columns(cells: pd.DataFrame, attempts: pd.DataFrame) -> pd.DataFrame:
    """COST_COLUMNS of `cells` (the metrics with their verdicts) from every attempt's run row."""
    spent = _spent(cells, attempts)
    own = cells["cell_id"].to_numpy(object)
    baseline = cells["baseline_cell_id"].to_numpy(object)
    verdict = cells["verdict"].notna().to_numpy()
    in_process = ((cells["speedup_method"] == PAIRED) & (cells["verdict_basis"] == MEDIAN_BASIS)).to_numpy()
    with_eager = verdict & ~in_process & pd.notna(baseline) & (baseline != own)
    position = pd.Index(own).get_indexer(baseline.astype(object))
    columns = {}
    for kind in ("gpu_s", "j"):
        mine = spent[f"spent_{kind}"].to_numpy(float)
        eager = np.where(with_eager, mine[np.maximum(position, 0)], 0.0)
        columns[f"spent_{kind}"] = mine
        columns[f"cost_{kind}"] = np.where(verdict, mine + eager, np.nan)
    return pd.DataFrame(columns, index=cells.index)[COST_COLUMNS]


def cost_texts(metrics: pd.DataFrame) -> dict[str, list[str]]:
    """The per-cell table's cost columns: GPU-minutes, and kJ where any cell measured energy."""
    texts = {"cost GPU-min": (metrics["cost_gpu_s"] / 60).map(fmt_number).tolist()}
    if metrics["cost_j"].notna().any():
        texts["cost kJ"] = (metrics["cost_j"] / 1e3).map(fmt_number).tolist()
    return texts
