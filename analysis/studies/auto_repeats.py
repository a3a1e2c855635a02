"""`repeats=auto` in the tables: how many replicates each cell ran, and what stopped it.

The stop rule (analysis/statistics/decision.py, docs/measurement.md) decides between rounds, the orchestrator
writes each stopped cell's record into its directory; this reads the records back
(workloads/contract/sweep_dir.py `read_auto_stop`).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis.cells.loaded import Loaded
from analysis.reading.axes import cell_labels
from analysis.rendering.text import Table, markdown
from analysis.studies.base import Study
from workloads.contract.sweep_dir import cell_dir, read_auto_stop

#: The table's name (its file stem in report/tables/).
AUTO_REPEATS = "auto_repeats"


def auto_repeats_table(sweep_dir: Path, cells: pd.DataFrame) -> Table | None:
    """The cells of `cells` (the per-cell metrics, or SweepData.cells) that stopped under repeats=auto:
    their replicates, why they stopped, and the speedup they stopped at (CSV); None where none did."""
    records = [read_auto_stop(cell_dir(sweep_dir, cell_id)) for cell_id in cells["cell_id"]]
    stopped = [record is not None for record in records]
    if not any(stopped):
        return None
    found = pd.DataFrame([record for record in records if record is not None])
    data = pd.DataFrame(
        {
            "cell_id": cells["cell_id"][stopped].to_numpy(),
            "replicates": found["replicates"],
            "reason": found["reason"],
            **{
                f"speedup{end}": found.get(key)
                for end, key in (("", "speedup"), ("_low", "low"), ("_high", "high"))
            },
        }
    )
    text = pd.DataFrame(
        {
            "cell": cell_labels(cells)[stopped].to_numpy(),
            "cell_id": data["cell_id"],
            "runs": data["replicates"].astype(str),
            "stopped by": data["reason"],
        }
    )
    note = (
        "repeats=auto ran each cell round after round until its verdict with the margin `equivalence` "
        "was decided (as the per-cell table's: faster, slower or no difference), its speedup's interval "
        "was narrower than measure.rel_ci (precise enough) or max_repeats was reached, never before 3 runs; "
        "each round's interval at the level left by spending 5% over runs 3 to max_repeats (the per-cell "
        "table's `interval`); an eager cell ran while an unpaired cell compared with it did, and every table "
        "judges an unpaired cell on the eager runs it stopped on; a cell with a run apart (`runs_apart`) "
        "is not stopped on a verdict."
    )
    return Table(AUTO_REPEATS, "repeats=auto: why each cell stopped", data, text, note)


def auto_repeats_markdown(loaded: Loaded) -> str:
    """The table of these cells as Markdown, under its heading: what a local sweep prints at its end."""
    table = auto_repeats_table(loaded.sweep_dir, loaded.metrics)
    return markdown(table) if table else "repeats=auto: no cell has stopped"


class AutoRepeats(Study):
    """Why each cell stopped, where repeats=auto ran it."""

    def tables(self, loaded: Loaded) -> list[Table]:
        table = auto_repeats_table(loaded.sweep_dir, loaded.metrics)
        return [table] if table else []
