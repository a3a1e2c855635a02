"""A sweep opened once: `open_sweep` reads its files (analysis/reading/collect.py) and measures one
row per cell (metrics.py `cell_metrics`) with the settings its verdicts are drawn with, resolved here
once. It is the one door into a sweep: `analyze`, `sweep_frames`, `compare`, the stop rule's
standings and the rounds, the table a sweep prints at its end and `bisect` all start from its
`Loaded`, so a sweep's verdicts are the same whichever of them prints them.

The margin of practical equivalence is the one given, else the one the sweep's repeats=auto cells
decide with (`auto_settings`), else EQUIVALENCE; each repeats=auto cell's interval is at the level
its stop rule spent (analysis/cells/uncertainty.py `interval_levels`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TextIO

import pandas as pd

from analysis.cells.device_time import LAUNCH_BOUND
from analysis.cells.gemm import gemm_cells, gemm_mask
from analysis.cells.gemm_layer import layer_cells
from analysis.cells.metrics import cell_metrics
from analysis.reading.collect import SweepData, load_cells, load_sweep
from analysis.statistics.verdicts import DATA_BOUND, EQUIVALENCE
from workloads.contract.sweep_dir import STDERR, cell_dir, cell_dirs, read_auto_stop, read_cell_config
from workloads.contract.vocabulary import AUTO_REPEATS


@dataclass(frozen=True)
class Settings:
    """What a sweep's verdicts are drawn with (`analyze`'s flags of the same names)."""

    equivalence: float | None = None
    """The margin of practical equivalence (0: none); None: the sweep's recorded one, else EQUIVALENCE."""
    data_bound: float = DATA_BOUND
    """The share of step time waiting for data above which a verdict rests on end-to-end throughput."""
    launch_bound: float = LAUNCH_BOUND
    """The share of a side's measured step the GPU idles above which it is launch-bound."""


@dataclass
class Loaded:
    """One sweep read and measured: what every table of it starts from."""

    sweep_dir: Path
    data: SweepData
    metrics: pd.DataFrame
    """One row per cell (analysis/cells/metrics.py), GEMM cells included."""
    equivalence: float
    """The margin of practical equivalence the verdicts were drawn with (0: none)."""
    data_bound: float
    launch_bound: float
    reference: str | None = None
    """The publication whose claims a report judges (`analyze --reference`), or None."""

    @cached_property
    def training(self) -> pd.DataFrame:
        """The metrics of the training cells: GEMM cells time one matrix multiply, not a step."""
        return self.metrics[~gemm_mask(self.metrics)]

    @cached_property
    def gemm(self) -> pd.DataFrame:
        """The GEMM cells' rows (analysis/cells/gemm.py), layer cells not among them; empty without any."""
        return gemm_cells(self.data, self.metrics)

    @cached_property
    def gemm_layers(self) -> pd.DataFrame:
        """The layer cells' rows (analysis/cells/gemm_layer.py), empty without any."""
        return layer_cells(self.data, self.metrics)


def open_sweep(
    sweep_dir: Path | str,
    cell_ids: Sequence[str] | None = None,
    settings: Settings | None = None,
    warn: TextIO | None = STDERR,
) -> Loaded:
    """Read SWEEP_DIR (every cell on disk or in its manifest; `cell_ids`: only these, e.g. the cells a
    sweep ran) and measure each cell with `settings` (module doc). Problems found on the way are
    printed on `warn` and kept in `data.problems`."""
    sweep_dir = Path(sweep_dir)
    settings = settings or Settings()
    if cell_ids is None:
        data = load_sweep(sweep_dir, warn)
        directories = cell_dirs(sweep_dir)
    else:
        directories = [cell_dir(sweep_dir, cell_id) for cell_id in cell_ids]
        data = load_cells(directories, warn)
    max_repeats, recorded, against = auto_settings(directories)
    equivalence = settings.equivalence
    if equivalence is None:
        equivalence = EQUIVALENCE if recorded is None else recorded
    metrics = cell_metrics(
        data,
        equivalence=equivalence,
        data_bound=settings.data_bound,
        launch_bound=settings.launch_bound,
        auto_max_repeats=max_repeats,
        stopped_against=against,
    )
    return Loaded(sweep_dir, data, metrics, equivalence, settings.data_bound, settings.launch_bound)


def auto_settings(directories: Sequence[Path]) -> tuple[dict[str, int], float | None, dict[str, int]]:
    """What the repeats=auto cells of these directories were decided with, from one read of each
    config.yaml: ({cell id: max_repeats}, their intervals being at the level the stop rule spent,
    analysis/cells/uncertainty.py `interval_levels`; the margin of equivalence they decide with;
    {cell id: its eager cell's runs when it stopped}, its stop record's `against`, so that a verdict
    is judged on the runs it stopped on however long its eager cell ran on for another cell). The
    margin is a stopped cell's from its stop record (what it was decided with), a cell's still going
    from its config.yaml (key `equivalence`, what the stop rule decides it with): so the verdicts of
    every table and the stop reasons agree, before a cell stops and after. None without such cells,
    or where they name different margins."""
    max_repeats, margins, against = {}, set(), {}
    for directory in directories:
        config = read_cell_config(directory, warn=None)
        if config.get("repeats") != AUTO_REPEATS:
            continue
        if "max_repeats" in config:
            max_repeats[Path(directory).name] = int(config["max_repeats"])
        record = read_auto_stop(directory)
        if record is not None and isinstance(record.get("against"), int):
            against[Path(directory).name] = record["against"]
        margins.add(record.get("equivalence") if record is not None else config.get("equivalence"))
    margin = margins.pop() if len(margins) == 1 else None
    return max_repeats, None if margin is None else float(margin), against
