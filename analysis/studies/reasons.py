"""Why graphs broke or recompiled: the top reasons across a sweep, with the cells they hit.

Each run row records dynamo's own reasons (workloads/instruments/dynamo_records.py): `graph_break_reasons`
and `recompile_reasons`, one {reason, count} per distinct reason. Here the reasons of every cell's
attempt that counts are grouped across the sweep by a short form of their text — the first line
(for a recompile the guard that failed and the line of code it guards; dynamo's long hints left
out) and, for a graph break, its explanation — with the numbers a guard compared written `N`
(`expected 64, actual 256`, `== 8`: one reason for every stage of a ResNet, not one per size), and
ranked by how many cells they hit, then by how often they occurred; run.parquet keeps the
literals. A sweep whose runs recorded no reason (eager and torchscript cells, cells that compiled
in one graph, runs written before these columns) gets no table.
"""

from __future__ import annotations

import re

import pandas as pd

from analysis.cells.loaded import Loaded
from analysis.reading.axes import cell_labels
from analysis.rendering.text import Table
from analysis.studies.base import Study

#: Name of the table (its file stem in report/tables/), and how many reasons it lists.
REASONS, TOP = "reasons", 20
#: The run columns that hold reasons, and what the table calls each kind.
KINDS = {"graph_break_reasons": "graph break", "recompile_reasons": "recompile"}
#: Cells named per reason (the CSV has them all); longest short reason.
CELLS_SHOWN, REASON_WIDTH = 5, 200
_HINT = re.compile(r"\s*\(HINT:.*$")
#: A number a guard compared: after expected/actual or a comparison operator.
_COMPARED = re.compile(r"\b(expected|actual)\s+-?\d+(?:\.\d+)?\b|([=!<>]=|[<>])\s*-?\d+(?:\.\d+)?\b")


def short_reason(text: str) -> str:
    """`Unsupported Tensor.item() call ...: Dynamo does not support ...`, `self.odd == False # self.odd = not
    self.odd # model.py:33 in forward`: the first line without dynamo's hint, white space folded,
    compared numbers as `N`, and the `Explanation:` line where there is one; cut to REASON_WIDTH."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    head = _COMPARED.sub(lambda m: f"{m[1] or m[2]} N", " ".join(_HINT.sub("", lines[0]).split()))
    explanation = next(
        (line.removeprefix("Explanation:").strip() for line in lines if line.startswith("Explanation:")), ""
    )
    short = f"{head}: {explanation}" if explanation else head
    return short if len(short) <= REASON_WIDTH else short[: REASON_WIDTH - 1] + "…"


def reason_rows(cells: pd.DataFrame) -> pd.DataFrame:
    """One row per (cell, kind, short reason) of the cells' run rows: cell_id, kind, reason, count."""
    rows = []
    for column, kind in KINDS.items():
        for cell_id, reasons in zip(cells["cell_id"], cells[column]):
            for entry in reasons if reasons is not None and not isinstance(reasons, float) else ():
                rows.append(
                    {
                        "cell_id": cell_id,
                        "kind": kind,
                        "reason": short_reason(entry["reason"]),
                        "count": int(entry["count"] or 0),
                    }
                )
    frame = pd.DataFrame(rows, columns=["cell_id", "kind", "reason", "count"])
    return frame.groupby(["cell_id", "kind", "reason"], as_index=False, sort=False)["count"].sum()


def reasons_table(cells: pd.DataFrame, metrics: pd.DataFrame) -> Table | None:
    """The TOP reasons across the sweep (`cells`: run rows with the reason columns; `metrics`: the
    per-cell metrics, for the cells' labels), or None where no run recorded one."""
    rows = reason_rows(cells)
    if rows.empty:
        return None
    labels = cell_labels(metrics).set_axis(metrics["cell_id"])
    grouped = rows.groupby(["kind", "reason"], sort=False).agg(
        count=("count", "sum"),
        cells=("cell_id", "nunique"),
        cell_ids=("cell_id", lambda ids: sorted(set(ids))),
    )
    data = (
        grouped.reset_index()
        .sort_values(
            ["cells", "count", "kind", "reason"], ascending=[False, False, True, True], kind="stable"
        )
        .reset_index(drop=True)
    )
    data["cell_ids"] = data["cell_ids"].map(" ".join)
    top = data.head(TOP)
    text = pd.DataFrame({
        "kind": top["kind"], "reason": top["reason"], "times": top["count"].astype(str),
        "cells": top["cells"].astype(str), "which": [_which(ids.split(), labels) for ids in top["cell_ids"]],
    })  # fmt: skip
    left_out = len(data) - len(top)
    note = (
        "Dynamo's own records of each cell's attempt that counts (rank 0's in a distributed cell): graph "
        "breaks (its message; times: how often it broke there) and recompiles (the guard that failed and the "
        "code it guards; times: recompiles). Ranked by cells hit, then times."
        + (f" {left_out} more reason(s) in the CSV." if left_out > 0 else "")
    )
    return Table(REASONS, "Why graphs broke or recompiled", data, text, note)


def _which(cell_ids: list[str], labels: pd.Series) -> str:
    """`breaky (gpt tiny · aot_eager), ...`: the first CELLS_SHOWN cells, and how many more."""
    named = [f"{cell_id} ({labels.get(cell_id, '?')})" for cell_id in cell_ids[:CELLS_SHOWN]]
    more = len(cell_ids) - CELLS_SHOWN
    return ", ".join(named) + (f" and {more} more" if more > 0 else "")


class Reasons(Study):
    """Why graphs broke or recompiled, where any run recorded a reason."""

    def tables(self, loaded: Loaded) -> list[Table]:
        table = reasons_table(loaded.data.cells, loaded.metrics)
        return [table] if table else []
