"""The tables a sweep prints: each cell's state (`compilebench status`, and a sweep that waited for
its jobs), and at a sweep's end the per-cell table of the cells run here and the repeats=auto table
of why each cell stopped. The analysis package renders them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from analysis.cells.loaded import open_sweep
from analysis.rendering.text import render_markdown
from analysis.studies.auto_repeats import auto_repeats_markdown
from analysis.studies.sweep.table import cells_markdown
from orchestrator.executors.status import CellStatus
from workloads.contract.vocabulary import AUTO_REPEATS, count_states, shown_axes


def status_table(rows: Sequence[CellStatus]) -> str:
    """The status table (Markdown) and a last line counting the cells by state."""
    shown = shown_axes([row.axes for row in rows])
    auto = ["repeats"] if any(row.repeats == AUTO_REPEATS for row in rows) else []
    table = render_markdown(
        [
            {
                "cell_id": row.cell_id,
                **{a: row.axes.get(a) for a in shown},
                "job_id": row.job_id,
                "state": row.state,
                "attempts": row.attempts,
                "repeats": _repeats(row),
                "error": row.error,
            }
            for row in rows
        ],
        ["cell_id", *shown, "job_id", "state", "attempts", *auto, "error"],
    )
    return f"{table}\n\n{len(rows)} cell(s): {count_states(row.state for row in rows)}"


def _repeats(row: CellStatus) -> str:
    """`3, decided: faster`: a stopped repeats=auto cell's replicates and why it stopped; `auto`
    before it stopped; the number of replicates otherwise."""
    if row.auto_stop:
        return f"{row.auto_stop['replicates']}, {row.auto_stop['reason']}"
    return str(row.repeats)


def closing_tables(sweep_dir: Path, cell_ids: Sequence[str], per_cell: bool, auto: bool) -> str:
    """What a sweep prints at its end: the per-cell table of these cells (`per_cell`: they ran here),
    and with repeats=auto why each stopped; '' for neither."""
    if not (per_cell or auto):
        return ""
    loaded = open_sweep(sweep_dir, cell_ids)  # the margin the stop rule decided with, as `analyze`'s
    tables = [cells_markdown(loaded)] if per_cell else []
    if auto:
        tables.append(auto_repeats_markdown(loaded))
    return "\n\n".join(tables)
