"""How cells are told apart by their axes: named, grouped and ordered, in every table and figure.

Names: a cell's backend label, its workload label (model and size, then the settings that differ
between the cells with a result) and the two together (`cell_labels`); an axis value as text.
Groups: the axes that cells compared with eager (`SAME_WORKLOAD`) and cells of one scaling series
(`SCALING_WORKLOAD`) share, the cell that speaks for a group where several share one
(`representatives`) and each cell's reference in its group (`reference_positions`: its eager cell,
its 1-process cell). Order: `sort_cells`, model to backend, eager first.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.rendering.text import is_null
from workloads.contract.vocabulary import (
    BASELINE_BACKEND,
    COMPLETED,
    HARDWARE,
    NO_RESULT,
    PROCESSES,
    TREATMENT,
    UNREADABLE,
    WORKLOAD,
    backend_label,
    names,
)

#: How many processes trained a cell, and where (`batch_size` and `grad_accum` are per process).
DISTRIBUTED_AXES = names(PROCESSES)
#: Cells compared with each other must agree on all of these; only the treatment (backend) may differ.
SAME_WORKLOAD = names(WORKLOAD, HARDWARE, PROCESSES)
#: Cells of one scaling series agree on all of these; only the processes (and their nodes) differ.
SCALING_WORKLOAD = names(WORKLOAD, HARDWARE, TREATMENT)
#: How a workload setting reads in a label: `b128` for batch 128, `procs 2` for two processes;
#: precision, data source, device and the process group's backend are recognisable by their values.
SETTING_PREFIXES = {
    "batch_size": "b",
    "grad_accum": "accum ",
    "seed": "seed ",
    "world_size": "procs ",
    "nodes": "nodes ",
}
SIZE_ORDER = {"tiny": 0, "small": 1, "medium": 2, "large": 3, "xl": 4}


def backend_labels(metrics: pd.DataFrame) -> pd.Series:
    """The backend label (workloads.contract.vocabulary.backend_label) of every cell."""
    treatments = names(TREATMENT)
    return pd.Series(
        [backend_label(dict(zip(treatments, values))) for values in axis_rows(metrics, treatments)],
        index=metrics.index,
        dtype=object,
    )


def axis_text(value: object) -> str:
    """An axis value as text ('' for null), e.g. for labels and for telling values apart."""
    return "" if is_null(value) else str(value)


def varying_axes(frame: pd.DataFrame, axes: list[str]) -> list[str]:
    """The axes whose values (null counting as one) differ between the rows of `frame`."""
    return [axis for axis in axes if frame[axis].map(axis_text).nunique() > 1]


def axis_rows(frame: pd.DataFrame, axes: list[str]) -> list[list[object]]:
    """Each row's values of `axes`, one list per row also when `axes` is empty (where pandas 2's
    itertuples yields no rows at all)."""
    return frame[axes].to_numpy(dtype=object).tolist()


#: Families whose cells are named by their arch (a resnet's is in its family's name).
_NAMED_BY_ARCH = ("timm", "custom", "gpt")


def workload_labels(metrics: pd.DataFrame, settings: list[str] = SAME_WORKLOAD) -> pd.Series:
    """`gpt-6x6x384 small`, `resnet small\nfp32 b128`: the arch (timm's name, a custom target, a GPT's
    layers x heads x width; a resnet's family) and size, and on a second line those of `settings`
    (workload axes) that differ between the cells with a result."""
    with_result = metrics[~metrics["status"].isin([NO_RESULT, UNREADABLE])]
    varying = varying_axes(with_result, [a for a in settings if a not in ("model", "arch", "size")])
    names = [
        " ".join(
            filter(
                None,
                (axis_text(arch if model in _NAMED_BY_ARCH else None) or axis_text(model), axis_text(size)),
            )
        )
        for model, arch, size in zip(metrics["model"], metrics["arch"], metrics["size"])
    ]
    lines = [
        " ".join(
            f"{SETTING_PREFIXES.get(a, '')}{axis_text(v)}" for a, v in zip(varying, values) if axis_text(v)
        )
        for values in axis_rows(metrics, varying)
    ]
    return pd.Series([f"{n}\n{s}" if s else n for n, s in zip(names, lines)], index=metrics.index)


def cell_labels(metrics: pd.DataFrame, settings: list[str] = SAME_WORKLOAD) -> pd.Series:
    """`gpt-6x6x384 small b64 · inductor`: a cell's workload (`workload_labels`, on one line) and backend."""
    return workload_labels(metrics, settings).str.replace("\n", " ") + " · " + backend_labels(metrics)


def representatives(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """The cell that speaks for each combination of `by` where several share one: a completed one
    first, then the one with most measured steps (other step counts of the same workload), then
    the first by id."""
    ranked = frame.assign(_done=frame["status"] == COMPLETED, _steps=frame["measured_steps"].fillna(0))
    ranked = ranked.sort_values(["_done", "_steps", "cell_id"], ascending=[False, False, True], kind="stable")
    return ranked.drop_duplicates(by).drop(columns=["_done", "_steps"])


def reference_positions(cells: pd.DataFrame, by: list[str], candidates: pd.Series) -> np.ndarray:
    """Position in `cells` of each cell's reference (-1: none): the representative of the completed
    `candidates` (a mask) with a median step among the cells that agree with it on `by`."""
    workload = cells.groupby(by, dropna=False, sort=False).ngroup().to_numpy()
    chosen = cells[candidates & (cells["status"] == COMPLETED) & cells["median_step_ms"].notna()]
    first = representatives(chosen.assign(_workload=workload[chosen.index]), ["_workload"])
    by_workload = np.full(workload.max() + 1 if len(workload) else 0, -1)
    by_workload[first["_workload"].to_numpy()] = first.index.to_numpy()
    return by_workload[workload]


def sort_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """Cells ordered model, architecture, size (tiny..xl), precision, batch, processes, eager first,
    backend, mode."""
    order = frame.assign(
        _size=frame["size"].map(SIZE_ORDER).fillna(len(SIZE_ORDER)),
        _compiled=frame["backend"] != BASELINE_BACKEND,
    )
    order = order.sort_values(
        [
            "model",
            "arch",
            "_size",
            "size",
            "precision",
            "batch_size",
            "world_size",
            "nodes",
            "_compiled",
            "backend",
            "compile_mode",
            "cell_id",
        ],
        kind="stable",
        na_position="last",
    )
    return frame.loc[order.index].reset_index(drop=True)


def multi_process(metrics: pd.DataFrame) -> pd.Series:
    """Whether each cell ran more than one process (unknown counts as one)."""
    return metrics["world_size"].fillna(1) > 1


def scaling_cells(metrics: pd.DataFrame) -> pd.DataFrame:
    """The cells of every scaling series that has a multi-process cell, one per number of processes
    and nodes, ordered as the per-cell table orders workloads, then by processes."""
    series = metrics.groupby(SCALING_WORKLOAD, dropna=False, sort=False).ngroup()  # numbered as they appear
    scaled = series.isin(series[multi_process(metrics)])
    cells = representatives(
        metrics[scaled].assign(_series=series[scaled]), ["_series", "world_size", "nodes"]
    )
    return cells.sort_values(["_series", "world_size", "nodes"], kind="stable").drop(columns="_series")
