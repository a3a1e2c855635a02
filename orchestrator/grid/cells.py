"""A sweep's cells: `Cell`, one point of the grid with its resolved config, and `Grid`, all of them
with the sweep directory and the cluster profile. orchestrator/grid/expand.py expands Hydra overrides into
a Grid; orchestrator/grid/files.py lays one out in its sweep directory and reads it back, which
needs neither Hydra nor the workloads' configs (a Slurm task, `status --retry-failed`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workloads.contract.vocabulary import AUTO_REPEATS, AXES, axes_from_config, backend_label, shown_axes


@dataclass(frozen=True)
class Cell:
    """One point of the grid."""

    cell_id: str
    overrides: tuple[str, ...]
    """The Hydra overrides that compose this cell (sweeper params first, then the command line)."""
    config: dict[str, Any] = field(compare=False)
    """Fully resolved config without the `hydra` node, `cell_id` set. Read-only: cells of one
    sweep share the sub-dicts their overrides did not change."""

    @functools.cached_property
    def axes(self) -> dict[str, Any]:
        """The cell's value of every axis its config gives (workloads/contract/vocabulary.py)."""
        return axes_from_config(self.config)

    def override_values(self) -> dict[str, str]:
        """The cell's overrides as {key: value}, `+`/`++`/`~` prefixes dropped."""
        pairs = (override.partition("=") for override in self.overrides)
        return {key.lstrip("+~"): value for key, _, value in pairs}

    @property
    def auto(self) -> bool:
        """Whether the cell runs replicates until its speedup is decided (`repeats=auto`)."""
        return self.config.get("repeats") == AUTO_REPEATS

    @property
    def repeats(self) -> int:
        """How many replicates of the cell a sweep runs (config key `repeats`); with repeats=auto the
        most it may run (`max_repeats`)."""
        return int(self.config["max_repeats"] if self.auto else self.config.get("repeats") or 1)

    @property
    def label(self) -> str:
        """Short human name, e.g. `gpt/tiny/inductor (max-autotune)/fp32`, with ` in torch215` for a cell
        of a named environment."""
        a = self.axes
        where = f" in {a['environment']}" if a.get("environment") else ""
        return f"{a['model']}/{a['size']}/{backend_label(a)}/{a['precision']}{where}"


@dataclass
class Grid:
    """All cells of one sweep plus what the orchestrator needs to place and run them."""

    cells: list[Cell]
    sweep_dir: Path
    cluster: dict[str, Any]

    @property
    def executor(self) -> str | None:
        """The cluster profile's `executor` (its default is conf/cluster_base.yaml's)."""
        return self.cluster.get("executor")

    def replicates(self) -> list[tuple[Cell, int]]:
        """Every (cell, repeat) to run, in run order: replicate 0 of every cell in grid order, then
        replicate 1 in the reverse order, ... (`round_order`), so that the backends of a workload
        alternate (eager, inductor, inductor, eager) and a drift of the machine over the sweep lags
        each side in every other round, favouring neither. A repeats=auto cell's first only: the
        rounds after it are decided as they go (orchestrator/sweep/rounds.py)."""
        rounds = max((cell.repeats for cell in self.cells), default=0)
        return [
            (cell, repeat)
            for repeat in range(rounds)
            for cell in self.round_order(repeat)
            if repeat < (1 if cell.auto else cell.repeats)
        ]

    def round_order(self, repeat: int) -> list[Cell]:
        """The cells in the order round `repeat` (0-based) runs them: grid order in even rounds, the
        reverse in odd ones. With eager always first, a host that slows 1% a round would lag the
        compiled side by half a round's drift in every round (tests/unit/analysis/test_simulation.py
        `drift`); reversed every other round the lags cancel in pairs of rounds."""
        return self.cells[::-1] if repeat % 2 else list(self.cells)

    def auto_note(self) -> str:
        """`, repeats: auto (≤ 10)` for a grid with repeats=auto cells, for the dry run's line; else ''."""
        most = [cell.repeats for cell in self.cells if cell.auto]
        return f", repeats: auto (≤ {max(most)})" if most else ""

    def swept_keys(self) -> list[str]:
        """Override keys whose value differs between cells and that are not an axis already."""
        values: dict[str, set[str]] = {}
        for cell in self.cells:
            for key, value in cell.override_values().items():
                values.setdefault(key, set()).add(value)
        return [k for k, v in values.items() if len(v) > 1 and not any(axis.set_by(k) for axis in AXES)]

    def rows(self) -> list[dict[str, Any]]:
        """One dict per cell for printing the grid: cell_id, the axes (`shown_axes`), and every
        other swept key."""
        axes = [cell.axes for cell in self.cells]
        shown, extra = shown_axes(axes), self.swept_keys()
        return [
            {
                "cell_id": cell.cell_id,
                **{name: values[name] for name in shown},
                **{key: cell.override_values().get(key) for key in extra},
            }
            for cell, values in zip(self.cells, axes)
        ]
