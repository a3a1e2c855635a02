"""Expand Hydra overrides into the cells of a sweep, each with a resolved config and a stable id.

This follows Hydra's own multirun path (`Hydra.multirun` -> `BasicSweeper.sweep` ->
`ConfigLoader.load_sweep_config`) instead of re-implementing the override grammar, so every
override Hydra accepts works here: `a=x,y`, `range()`, `choice()`, `glob()`, `+experiment=...`,
`hydra.sweep.dir=...`, and `hydra.sweeper.params` from an experiment (where a command-line
override of the same key wins, as in Hydra).
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from hydra import initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, OverrideParseException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from workloads.config import ConfigError, cell_config_from_dict, config_digest
from workloads.run import check_cell

#: The Hydra config groups of the project (conf/), next to this package.
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
CONFIG_NAME = "config"

#: Hydra's stock `hydra.sweep.dir` (hydra/conf/hydra/output/default.yaml). When the sweep
#: dir is still this, nobody chose one, and we use `sweeps/<timestamp>` instead.
HYDRA_DEFAULT_SWEEP_DIR = "multirun/${now:%Y-%m-%d}/${now:%H-%M-%S}"

#: The axes every cell is described by (manifest columns, progress lines, tables).
AXES = ("model", "size", "backend", "compile_mode", "precision")


class GridError(Exception):
    """Bad sweep input; the message is one line meant for the user as is."""


@dataclass(frozen=True)
class Cell:
    """One point of the grid."""

    cell_id: str
    overrides: tuple[str, ...]
    """The Hydra overrides that compose this cell (sweeper params first, then the command line)."""
    config: dict[str, Any] = field(compare=False)
    """Fully resolved config without the `hydra` node, `cell_id` set."""

    @property
    def axes(self) -> dict[str, Any]:
        cfg = self.config
        return {
            "model": cfg["model"]["name"],
            "size": cfg["size"],
            "backend": cfg["backend"]["name"],
            "compile_mode": cfg["backend"].get("mode"),
            "precision": cfg["precision"]["name"],
        }

    def override_values(self) -> dict[str, str]:
        """The cell's overrides as {key: value}, `+`/`++`/`~` prefixes dropped."""
        pairs = (override.partition("=") for override in self.overrides)
        return {key.lstrip("+~"): value for key, _, value in pairs}

    @property
    def label(self) -> str:
        """Short human name, e.g. `gpt/tiny/inductor/fp32` (mode appended when not default)."""
        a = self.axes
        backend = a["backend"] if a["compile_mode"] in (None, "default") else f"{a['backend']}:{a['compile_mode']}"
        return f"{a['model']}/{a['size']}/{backend}/{a['precision']}"


@dataclass
class Grid:
    """All cells of one sweep plus what the orchestrator needs to place and run them."""

    cells: list[Cell]
    sweep_dir: Path
    cluster: dict[str, Any]

    @property
    def executor(self) -> str:
        return str(self.cluster.get("executor", "local"))

    def swept_keys(self) -> list[str]:
        """Override keys whose value differs between cells and that are not an axis already."""
        values: dict[str, set[str]] = {}
        for cell in self.cells:
            for key, value in cell.override_values().items():
                values.setdefault(key, set()).add(value)
        return [k for k, v in values.items() if len(v) > 1 and k not in ("model", "size", "backend", "precision")]

    def rows(self) -> list[dict[str, Any]]:
        """One dict per cell: cell_id, the axes, and every other swept key (for printing the grid)."""
        extra = self.swept_keys()
        return [
            {"cell_id": c.cell_id, **c.axes, **{k: c.override_values().get(k) for k in extra}} for c in self.cells
        ]


def cell_id_of(values: Mapping[str, Any]) -> str:
    """Stable id of a cell: the workload's own digest of its normalised config.

    Going through `CellConfig` drops the orchestrator-only keys (`cluster`, `hydra`, ...) and
    fills defaults, so the same experiment on another cluster keeps its id, a re-run of the
    sweep finds its finished cells, and `workloads.run` derives the same id from a config
    file without one.
    """
    return config_digest(cell_config_from_dict(values))


def one_line(exc: BaseException) -> str:
    """Hydra/OmegaConf messages span several lines (options, search path); make them one."""
    text = str(exc)
    if isinstance(exc, OverrideParseException):
        text = f"cannot parse override '{exc.override}': {exc.message}"
    elif isinstance(exc, OmegaConfBaseException) and getattr(exc, "full_key", None):
        text = f"{text.splitlines()[0]} (at {exc.full_key})"
    text = text.split("Config search path:")[0]  # the search path only repeats conf/
    # OmegaConf appends `full_key: ...`, `object_type=...` lines that repeat what the first says.
    lines = [line.strip() for line in text.splitlines() if line.strip() and not _OMEGACONF_TRAILER.match(line.strip())]
    if not lines:
        return type(exc).__name__
    head, rest = lines[0], lines[1:]
    for i, line in enumerate(rest):
        if line.startswith("Available options in"):
            options = ", ".join(rest[i + 1 :])
            return f"{head} ({line.rstrip(':').lower()}: {options})"
    return " ".join([head, *rest])


_OMEGACONF_TRAILER = re.compile(r"^(full_key|object_type|reference_type|key|value)[:=]")


def _default_sweep_dir() -> Path:
    return Path("sweeps") / time.strftime("%Y-%m-%d_%H-%M-%S")


def _resolve_cell(cfg: DictConfig, overrides: Sequence[str]) -> dict[str, Any]:
    """The composed config as a plain dict, without Hydra's node, validated by the workload schema."""
    with open_dict(cfg):
        cfg.pop("hydra", None)  # its interpolations (hydra.job.num, ...) only resolve inside a Hydra job
    try:
        values = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
        assert isinstance(values, dict)
        cell_config = cell_config_from_dict(values)
        check_cell(cell_config)  # unknown size/backend, unfit data: before any run
        values["cell_id"] = config_digest(cell_config)  # = cell_id_of(values), converted once
    except (ConfigError, OmegaConfBaseException) as exc:
        raise GridError(f"{' '.join(overrides) or '(defaults)'}: {one_line(exc)}") from exc
    return values


def expand(overrides: Sequence[str], config_dir: Path = CONF_DIR) -> Grid:
    """Expand command-line overrides into the grid of cells; raises GridError on bad input."""
    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
            loader = GlobalHydra.instance().config_loader()
            # The multirun "master" config: experiment and plain overrides applied, sweeps not yet.
            master = loader.load_configuration(CONFIG_NAME, list(overrides), run_mode=RunMode.MULTIRUN)
            params = master.hydra.sweeper.params or {}
            # As BasicSweeper.sweep: sweeper params first, so a command-line override of the
            # same key replaces them (split_arguments keys its product by override key).
            arguments = [f"{k}={v}" for k, v in params.items()]
            arguments += list(OmegaConf.to_container(master.hydra.overrides.task, resolve=False))
            parsed = OverridesParser.create(config_loader=loader).parse_overrides(arguments)
            batches = BasicSweeper.split_arguments(parsed, max_batch_size=None)[0]

            cells: dict[str, Cell] = {}
            for batch in batches:
                cfg = loader.load_sweep_config(master, list(batch))
                values = _resolve_cell(cfg, batch)
                cell = Cell(cell_id=values["cell_id"], overrides=tuple(batch), config=values)
                cells.setdefault(cell.cell_id, cell)  # `steps=10,10` gives one cell, not two

            sweep_dir = _sweep_dir(master, overrides)
    except GridError:
        raise
    except (HydraException, OmegaConfBaseException) as exc:
        raise GridError(one_line(exc)) from exc
    # One sweep, one executor: the cluster is not an axis (and not part of the cell id).
    clusters = {json.dumps(c.config.get("cluster"), sort_keys=True) for c in cells.values()}
    if len(clusters) > 1:
        raise GridError("the cluster differs between cells; sweep one cluster at a time")
    return Grid(cells=list(cells.values()), sweep_dir=sweep_dir, cluster=json.loads(clusters.pop()) or {})


def _sweep_dir(master: DictConfig, overrides: Sequence[str]) -> Path:
    """`hydra.sweep.dir` if anyone chose it (command line or experiment), else sweeps/<timestamp>."""
    chosen = any(o.startswith("hydra.sweep.dir=") for o in overrides)
    raw = OmegaConf.to_container(master.hydra.sweep, resolve=False).get("dir")
    if not chosen and raw == HYDRA_DEFAULT_SWEEP_DIR:
        path = _default_sweep_dir()
    else:
        path = Path(str(master.hydra.sweep.dir))
    return path if path.is_absolute() else Path(os.getcwd()) / path
