"""A comparison as one JSON object or as Markdown: the compared cells' table and what it rests on, the
per-backend speedups, the cells not compared and those only in one sweep, and a count line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from analysis.compare.comparison import Comparison
from analysis.compare.verdicts import HOST_CHANGE, HOST_MODEL_TOLERANCE, NO_DEVICE_TIME
from analysis.reading.axes import axis_text
from analysis.rendering.text import fmt_number, fmt_speedup, is_null, render_markdown


def to_json(comparison: Comparison) -> str:
    """The comparison as one JSON object: threshold, cells (comparison.py COLUMNS), only_in_a,
    only_in_b (cell id, label, status), not_compared, speedups (SPEEDUP_COLUMNS), regressions and
    host changes (how many)."""
    records = lambda frame: json.loads(frame.to_json(orient="records", double_precision=15))  # noqa: E731
    cells = comparison.cells
    return json.dumps(
        {
            "threshold": comparison.threshold,
            "cells": records(cells),
            "only_in_a": records(comparison.only_in_a),
            "only_in_b": records(comparison.only_in_b),
            "not_compared": records(comparison.not_compared),
            "speedups": records(comparison.speedups),
            "regressions": len(comparison.regressions),
            "host_changes": int((cells["verdict"] == HOST_CHANGE).sum()),
        },
        indent=1,
    )


def _cell_rows(comparison: Comparison) -> list[dict[str, str]]:
    """The compared cells' table rows; the GPU time's columns where a cell has device time in both
    sweeps, the GPUs' where they differ (another cluster)."""
    rows = []
    cells = comparison.cells
    device = cells["gpu_ratio"].notna().any()
    for cell in cells.to_dict("records"):
        row = {
            "cell": cell["label"],
            "A ms": fmt_number(cell["a_median_step_ms"]),
            "B ms": fmt_number(cell["b_median_step_ms"]),
            "B/A step time [95% CI]": fmt_speedup(
                cell["step_ratio"], cell["step_ratio_low"], cell["step_ratio_high"], digits=3
            ),
            "B/A items/s [95% CI]": fmt_speedup(
                cell["throughput_ratio"],
                cell["throughput_ratio_low"],
                cell["throughput_ratio_high"],
                digits=3,
            ),
            "interval": cell["interval"],
        }
        if device:
            measured = not is_null(cell["gpu_ratio"])
            row["B/A GPU time [95% CI]"] = (
                fmt_speedup(cell["gpu_ratio"], cell["gpu_ratio_low"], cell["gpu_ratio_high"], digits=3)
                if measured
                else NO_DEVICE_TIME
            )
            row["GPU interval"] = cell["gpu_interval"] if measured else ""
        note = cell["verdict_note"]
        row["verdict"] = (cell["verdict"] or "") + ("" if is_null(note) else f": {note}")
        rows.append(row)
    if (cells["a_gpu_name"].map(axis_text) != cells["b_gpu_name"].map(axis_text)).any():
        for row, a_gpu, b_gpu in zip(rows, cells["a_gpu_name"], cells["b_gpu_name"]):
            row.update({"A GPU": axis_text(a_gpu), "B GPU": axis_text(b_gpu)})
    return rows


def _method(comparison: Comparison) -> str:
    """What the table's intervals and verdicts rest on, in a paragraph."""
    t = comparison.threshold
    text = (
        f"Median step time and end-to-end throughput, B / A, 95% intervals: where both ran 2 runs or "
        f"more, Welch's over the runs (`across A+B runs`), else a bootstrap of the steps that cannot see "
        f"run-to-run spread (`within one process`). Regression: the step time interval lies above "
        f"{1 + t:g} (B slower by more than {100 * t:g}%); improvement: below {1 - t:g}; within threshold: "
        f"inside [{1 - t:g}, {1 + t:g}]."
    )
    if comparison.cells["gpu_ratio"].notna().any():
        text += (
            f" GPU time per step, B / A: the device's own time, which a host does not move; its interval "
            f"over the runs, or with one run on a side over the profiled windows (`within one process`). "
            f"A host change: the step moved beyond the threshold while the GPU time stayed within "
            f"[{1 - t:g}, {1 + t:g}] and the launches per step with it, the host probe (a fixed pure-"
            f"Python loop before and after measuring, apart from the steps and from torch) differs between "
            f"the sweeps beyond its noise (its 95% interval excludes 1), and the host model fed with the "
            f"probe ratio (`model`) gives the step ratio within {100 * HOST_MODEL_TOLERANCE:g}%; it is "
            f"neither an improvement nor a regression. Otherwise the step's verdict stands. "
            f"{NO_DEVICE_TIME.capitalize()}: the step alone decides."
        )
    else:
        text += f" {NO_DEVICE_TIME.capitalize()} in these cells (CPU, or sweeps before it): the step decides."
    return text


def _speedup_lines(comparison: Comparison) -> list[str]:
    if not len(comparison.speedups):
        return []
    rows = [
        {
            "backend": row["backend"],
            "cells": str(row["cells"]),
            "A geomean speedup": fmt_speedup(row["a_geomean_speedup"], digits=3),
            "B geomean speedup": fmt_speedup(row["b_geomean_speedup"], digits=3),
            "B/A": f"{row['geomean_ratio']:.3f}",
            "GPU alone A → B": _device(row),
            "changed most": f"{row['most_changed']}: {fmt_speedup(row['most_changed_a'], digits=2)} → "
            f"{fmt_speedup(row['most_changed_b'], digits=2)}",
        }
        for row in comparison.speedups.to_dict("records")
    ]
    return [
        "",
        render_markdown(rows, list(rows[0])),
        "",
        "Speedup over eager (as `analyze` gives it: paired where the cell measured paired, else eager "
        "median step / own) of the cells with one in both sweeps, geometric mean per backend, and the "
        "cell whose speedup changed most. GPU alone: the same cells' device-time speedups (eager GPU time "
        "per step / compiled), which a host does not move: where the wall speedup moved and they did not, "
        "the change is the host's side of the step, the host's speed or the code's host work (a cell's "
        "verdict and its probe above tell which).",
    ]


def _device(row: dict) -> str:
    """`0.986x → 0.988x`, or '' where a cell of either sweep has no device time."""
    a, b = row["a_geomean_device_speedup"], row["b_geomean_device_speedup"]
    return "" if is_null(a) or is_null(b) else f"{fmt_speedup(a, digits=3)} → {fmt_speedup(b, digits=3)}"


def _hosts_line(comparison: Comparison) -> str | None:
    """Where the compared cells ran, `node (CPU model)`, and whether A's and B's hosts differ; None
    where no run recorded it."""
    hosts = [
        sorted({name for names in comparison.cells[column].dropna() for name in names.split(", ")})
        for column in ("a_hosts", "b_hosts")
    ]
    if not hosts[0] and not hosts[1]:
        return None
    a, b = (", ".join(names) or "unknown" for names in hosts)
    if hosts[0] == hosts[1]:
        return f"Hosts: A and B ran on the same: {a}."
    return f"Hosts differ: A ran on {a}; B on {b}."


def _count_line(comparison: Comparison) -> str:
    """'3 cell(s) compared, 1 host change(s), 1 regression(s): gpt tiny · inductor 1.100x'."""
    cells, regressions = comparison.cells, comparison.regressions
    hosts = int(np.sum(cells["verdict"] == HOST_CHANGE))
    named = "; ".join(
        f"{label} {ratio:.3f}x" for label, ratio in zip(regressions["label"], regressions["step_ratio"])
    )
    return (
        f"{len(cells)} cell(s) compared, "
        + (f"{hosts} host change(s), " if hosts else "")
        + f"{len(regressions)} regression(s)"
        + (f": {named}" if named else "")
    )


def to_markdown(comparison: Comparison, sweep_a: Path, sweep_b: Path) -> str:
    """The compared cells as a table, then the cells not compared and those only in one sweep, then
    a line that counts the host changes and the regressions and names the regressed cells."""
    rows = _cell_rows(comparison)
    lines = [f"### B = {sweep_b} against A = {sweep_a}", ""]
    if rows:
        lines += [render_markdown(rows, list(rows[0])), ""]
    lines.append(_method(comparison))
    if hosts := _hosts_line(comparison):
        lines += ["", hosts]
    lines += _speedup_lines(comparison)
    for title, frame, status in (
        ("Not compared (not completed in both)", comparison.not_compared, None),
        (f"Only in A ({sweep_a})", comparison.only_in_a, "status"),
        (f"Only in B ({sweep_b})", comparison.only_in_b, "status"),
    ):
        if len(frame):
            lines += ["", f"{title}:"]
            lines += [f"- {row['label']} ({_cell_text(row, status)})" for row in frame.to_dict("records")]
    return "\n".join([*lines, "", _count_line(comparison)])


def _cell_text(row: dict, status: str | None) -> str:
    if status:
        return f"{row['cell_id']}, {row['status']}"
    return f"A {row['a_cell_id']} {row['a_status']}, B {row['b_cell_id']} {row['b_status']}"
