"""Per-cell summary of a sweep, rendered as Markdown or CSV.

Step statistics come from the measured steps (`phase == "measure"`) of the attempt that
counts, so warm-up and compilation never leak into them. Only `completed` cells get timing
numbers and a speedup: a `not_compiled` or failed cell stays in the table with its status,
but what it measured is not a result.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, TextIO

import numpy as np
import pandas as pd

from analysis.collect import CellData, read_sweep

SUMMARY_COLUMNS = [
    "cell_id", "model", "size", "backend", "compile_mode", "precision", "status",
    "median_step_ms", "mean_step_ms", "std_step_ms", "items_per_s", "mfu",
    "compile_time_s", "graph_count", "graph_break_count", "speedup",
]  # fmt: skip

#: Cells compared for speedup must agree on all of these; only the backend may differ.
SAME_WORKLOAD = ["model", "arch", "size", "precision", "batch_size", "grad_accum", "data_source", "seed"]

SIZE_ORDER = {"tiny": 0, "small": 1, "medium": 2, "large": 3, "xl": 4}


def _axes_from_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Axes of a cell that has no run row (not run yet, or its run.parquet is unreadable)."""

    def sub(key: str, name: str) -> Any:
        value = config.get(key)
        return value.get(name) if isinstance(value, Mapping) else None

    return {
        "model": sub("model", "name"), "arch": sub("model", "arch"), "size": config.get("size"),
        "backend": sub("backend", "name"), "compile_mode": sub("backend", "mode"),
        "precision": sub("precision", "name"), "batch_size": config.get("batch_size"),
        "grad_accum": config.get("grad_accum"), "data_source": sub("data", "source"),
        "seed": config.get("seed"),
    }  # fmt: skip


def _step_stats(cell: CellData) -> dict[str, float]:
    """Median/mean/std step time, throughput and MFU over the measured steps."""
    run = cell.run
    assert run is not None
    steps = cell.steps
    measured = steps[steps["phase"] == "measure"] if steps is not None else None
    if measured is None or measured.empty:
        # No steps file (or no measured rows): fall back to the run row's own summary.
        return {k: run.get(k) for k in ("median_step_ms", "mean_step_ms", "std_step_ms", "items_per_s", "mfu")}
    times = measured["step_time_ms"].astype(float)
    median_ms = times.median()
    items = measured["items"].astype(float).median()
    return {
        "median_step_ms": median_ms,
        "mean_step_ms": times.mean(),
        "std_step_ms": times.std(),  # sample std (ddof=1); NaN for a single step
        # At the median step, as the workload's run row does, so the two never disagree.
        "items_per_s": items / (median_ms / 1e3) if median_ms > 0 and not math.isnan(items) else run.get("items_per_s"),
        "mfu": measured["mfu"].astype(float).mean() if measured["mfu"].notna().any() else run.get("mfu"),
    }


def _cell_row(cell: CellData) -> dict[str, Any]:
    if cell.run is None:
        row = _axes_from_config(cell.config)
        row.update(cell_id=cell.cell_id, status=cell.problem)
        return row
    run = cell.run
    row = {key: run.get(key) for key in ["status", "compile_time_s", "graph_count", "graph_break_count", *SAME_WORKLOAD]}
    row.update(cell_id=cell.cell_id, backend=run.get("backend"), compile_mode=run.get("compile_mode"))
    if run["status"] == "completed":
        row.update(_step_stats(cell))
    return row


def _key_part(value: Any) -> str:
    """Comparable text of a workload key value: nulls match each other (arch/batch = preset
    default), and 128 matches 128.0 (an int column with nulls comes back from Parquet as float)."""
    if _is_null(value):
        return ""
    if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
        return repr(float(value))
    return str(value)


def _is_null(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _add_speedup(df: pd.DataFrame) -> pd.DataFrame:
    """speedup = median step of the matching eager cell / own median step (>1 is faster)."""
    df["speedup"] = math.nan
    done = df[(df["status"] == "completed") & df["median_step_ms"].notna()]
    eager = done[done["backend"] == "eager"]
    if eager.empty:
        return df
    key = lambda frame: frame[SAME_WORKLOAD].map(_key_part).agg("|".join, axis=1)  # noqa: E731
    # Several eager cells can match (other steps/warm-up); the median of their medians is neutral.
    baseline = eager.groupby(key(eager))["median_step_ms"].median()
    df.loc[done.index, "speedup"] = key(done).map(baseline) / done["median_step_ms"].astype(float)
    return df


def summarize(cells: Iterable[CellData]) -> pd.DataFrame:
    """One row per cell with SUMMARY_COLUMNS, ordered model, size, precision, eager first."""
    rows = [_cell_row(cell) for cell in cells]
    df = pd.DataFrame(rows, columns=list(dict.fromkeys(SUMMARY_COLUMNS + SAME_WORKLOAD)))
    if df.empty:
        return df[SUMMARY_COLUMNS]
    df = _add_speedup(df)
    df = df.assign(_size=df["size"].map(SIZE_ORDER).fillna(len(SIZE_ORDER)), _eager=df["backend"] != "eager")
    df = df.sort_values(["model", "arch", "_size", "size", "precision", "_eager", "backend", "compile_mode"],
                        kind="stable", na_position="last")  # fmt: skip
    counts = ["graph_count", "graph_break_count"]  # nullable ints: 3, not 3.0, in CSV
    df[counts] = df[counts].apply(pd.to_numeric, errors="coerce").astype("Int64")
    return df[SUMMARY_COLUMNS].reset_index(drop=True)


def sweep_summary(sweep_dir: Path, warn: TextIO | None = sys.stderr) -> pd.DataFrame:
    """Read a sweep directory and summarise it (empty DataFrame when it has no cells)."""
    return summarize(read_sweep(Path(sweep_dir), warn))


def _fmt(column: str, value: Any) -> str:
    if _is_null(value):
        return ""
    if column == "mfu":
        return f"{100 * value:.1f}%"
    if column == "speedup":
        return f"{value:.2f}x"
    if column == "items_per_s":
        return f"{value:,.0f}"
    if column in ("graph_count", "graph_break_count"):
        return str(int(value))
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.1f}"
    return str(value)


def render_markdown(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """A GitHub-flavoured Markdown table of `rows` (dicts) with aligned columns."""
    cells = [[_fmt(c, row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    line = lambda values: "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths)) + " |"  # noqa: E731
    return "\n".join([line(columns), line(["-" * w for w in widths]), *map(line, cells)])


def to_markdown(df: pd.DataFrame) -> str:
    """The summary as a Markdown table (units: ms, items/s, MFU in percent)."""
    return render_markdown(df.to_dict("records"), list(df.columns))


def to_csv(df: pd.DataFrame) -> str:
    """The summary as CSV with raw numbers (MFU as a fraction)."""
    return df.to_csv(index=False)
