"""Layer cells (`model=gemm gemm.layer=...`): one row per layer cell, the post's layer launched one by
one against one CUDA graph (workloads/gemm/layer.py; docs/gemm.md "The post's layer").

A layer cell is a GEMM cell whose GEMM is the layer: its measured replays are layers back to back
(`us`, ms per layer x 1000, with the GEMM table's interval), and its `layer_*` columns come from the
profiled windows of one layer each way after its loop, the median over its completed replicates
(analysis/cells/gemm.py `measured_cells`). Cells of sweeps before layers have no `gemm_layer`: none is one.
"""

from __future__ import annotations

import pandas as pd

from analysis.cells.gemm import gemm_mask, measured_cells
from analysis.cells.uncertainty import RESAMPLES
from analysis.reading.collect import SweepData
from workloads.contract.schema import LAYER_FIELDS

#: A layer cell's own columns, as its replicates give them.
LAYER_COLUMNS = ["gemm_m", "fp8_recipe", "gemm_floor_us", "gemm_kernel",
                 *(field.name for field in LAYER_FIELDS)]  # fmt: skip
#: Our own bootstrap stream (the GEMM table's is 26): these draws are independent of its.
_STREAM = (27,)


def layer_mask(metrics: pd.DataFrame) -> pd.Series:
    """Which cells are layer cells: GEMM cells that ran a layer's GEMMs."""
    return gemm_mask(metrics) & metrics["gemm_layer"].notna()


def layer_cells(data: SweepData, metrics: pd.DataFrame, resamples: int = RESAMPLES) -> pd.DataFrame:
    """One row per layer cell (empty without any): its M, layer and implementation, µs per layer
    replayed back to back with its 95% interval, and its layer_* columns."""
    ours = metrics[layer_mask(metrics)]
    if ours.empty:
        return pd.DataFrame()
    base = ours[["cell_id", "status", "gemm_layer", "precision", "backend", "compile_mode", "gpu_name",
                 "median_step_ms", "measured_steps"]]  # fmt: skip
    cells = measured_cells(data, base, LAYER_COLUMNS, resamples, _STREAM)
    order = cells.sort_values(["gemm_layer", "gemm_m", "backend"], na_position="first").index
    return cells.loc[order].drop(columns="median_step_ms").reset_index(drop=True)
