"""Expand Hydra overrides into the cells of a sweep, each with a resolved config and a stable id.

This follows Hydra's own multirun path (`Hydra.multirun` -> `BasicSweeper.sweep` ->
`ConfigLoader.load_sweep_config`) instead of re-implementing the override grammar, so every
override Hydra accepts works here: `a=x,y`, `range()`, `choice()`, `glob()`, `+experiment=...`,
`hydra.sweep.dir=...`, and `hydra.sweeper.params` from an experiment (where a command-line
override of the same key wins, as in Hydra).
"""

from __future__ import annotations

import copy
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, OverrideType
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

import orchestrator.grid.config_store  # noqa: F401 (registers `cell_defaults`, which conf/config.yaml composes)
from orchestrator.grid.cells import Cell, Grid
from orchestrator.grid.config_groups import (
    ConfigDirError,
    group_values,
    refused,
    search_dirs,
    search_path_override,
)
from orchestrator.grid.environments import check_cell_environments
from orchestrator.grid.errors import one_line
from orchestrator.grid.package_data import CONF_DIR
from orchestrator.grid.private_apis import (
    apply_overrides,
    caching_repository,
    compose_groups,
    extend_search_path,
    group_exists,
    job_overrides,
    split_sweep,
)
from orchestrator.grid.profile import ProfileError
from workloads.cell.catalog import check_cell
from workloads.cell.cell_id import config_digest
from workloads.cell.config import ConfigError
from workloads.cell.config_io import cell_config_from_dict, moved_key
from workloads.contract.sweep_dir import SMOKE_DIR

CONFIG_NAME = "config"

#: Hydra's stock `hydra.sweep.dir` (hydra/conf/hydra/output/default.yaml). When the sweep
#: dir is still this, nobody chose one, and we use `sweeps/<timestamp>` instead.
HYDRA_DEFAULT_SWEEP_DIR = "multirun/${now:%Y-%m-%d}/${now:%H-%M-%S}"


class GridError(Exception):
    """Bad sweep input; the message is one line meant for the user as is."""


def _default_sweep_dir() -> Path:
    return Path("sweeps") / time.strftime("%Y-%m-%d_%H-%M-%S")


def _checked(values: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """The cell's plain config validated by the workload schema, `cell_id` set: the workload's own
    digest of its normalised config. Going through `CellConfig` drops the orchestrator-only keys
    (`cluster`, `hydra`, ...) and fills defaults, so the same experiment on another cluster keeps its
    id, a re-run of the sweep finds its finished cells, and `workloads.run` derives the same id from a
    config file without one."""
    try:
        cell_config = cell_config_from_dict(values)
        check_cell(
            cell_config, submitting=True
        )  # unknown size/backend, unfit data, a bad target: before any run
    except ConfigError as exc:
        raise GridError(f"{' '.join(overrides) or '(defaults)'}: {one_line(exc)}") from exc
    values["cell_id"] = config_digest(cell_config)
    return values


@dataclass
class _Composed:
    """One selection of config groups, composed by Hydra."""

    config: DictConfig
    """The composed config without the `hydra` node, plain overrides not applied yet."""
    resolved: dict[str, Any] | None
    """`config` as a resolved dict when no value in it is an interpolation or missing (`???`):
    then setting a leaf cannot change any other value, and plain overrides can be set on a copy."""


class _Composer:
    """Hydra's composition of each cell, done once per distinct selection of config groups.

    Hydra composes every job from scratch (`load_sweep_config`, ~60 ms on a 2-core machine);
    a 10,000-cell sweep mostly varies plain values (`seed=range(250)`) over a few dozen group
    selections. So the groups are composed once and the plain overrides applied per cell — by
    Hydra's own `_apply_overrides_to_config` on a copy, or, for the common `key=value` of an
    existing leaf in a config without interpolations, by setting it in a copy of the resolved
    dict, which gives the same config ~100 times faster.
    """

    def __init__(self, loader: Any, master: DictConfig, known: dict[str, Override]) -> None:
        self._loader, self._master, self._known = loader, master, known
        self._parser = OverridesParser.create(config_loader=loader)
        self._parsed: dict[str, tuple[Override, bool]] = {}
        self._groups: dict[str, bool] = {}
        self._composed: dict[tuple[str, ...], _Composed] = {}
        self._repo = caching_repository(loader)  # each config file read once per expansion

    def cell_values(self, overrides: Sequence[str]) -> dict[str, Any]:
        """The resolved config of one cell (without the `hydra` node), validated, `cell_id` set."""
        parsed = [self._parse(line) for line in overrides]
        groups = tuple(o.input_line for o, is_group in parsed if is_group)
        plain = [o for o, is_group in parsed if not is_group]
        composed = self._compose(groups)
        values = self._fast_apply(composed, plain)
        if values is None:
            cfg = copy.deepcopy(composed.config)
            apply_overrides(plain, cfg)
            values = self._to_dict(cfg, overrides)
        return _checked(values, overrides)

    def _parse(self, line: str) -> tuple[Override, bool]:
        """The parsed override and whether it selects a config group: as the sweep's parse made it
        (`known`), else parsed here, once per distinct line (a glob's values)."""
        if line not in self._parsed:
            override = self._known.get(line) or self._parser.parse_override(line)
            # Hydra's own split (defaults_list.Overrides): a group key with a non-dict value selects a config.
            is_group = not isinstance(override.value(), dict) and self._is_group(override.key_or_group)
            self._parsed[line] = (override, is_group)
        return self._parsed[line]

    def _is_group(self, key: str) -> bool:
        """Whether `key` names a config group; asked once per key (`seed=range(10000)` is one key)."""
        if key not in self._groups:
            self._groups[key] = group_exists(self._loader, key)
        return self._groups[key]

    def _compose(self, groups: tuple[str, ...]) -> _Composed:
        if groups not in self._composed:
            # Hydra's own composition (ConfigLoaderImpl._load_configuration_impl) without Hydra's
            # node: composing Hydra's ~10 own configs was two thirds of the time, and a cell
            # drops that node anyway (its interpolations only resolve inside a Hydra job).
            cfg = compose_groups(
                self._loader, CONFIG_NAME, [self._parse(line)[0] for line in groups], self._repo
            )
            OmegaConf.set_struct(cfg, True)  # as Hydra: a plain override of a missing key is an error
            OmegaConf.copy_cache(from_config=self._master, to_config=cfg)  # as load_sweep_config
            with open_dict(cfg):
                cfg.pop(
                    "hydra", None
                )  # what an experiment says of Hydra (sweeper params) was read from the master
            unresolved = json.dumps(OmegaConf.to_container(cfg, resolve=False), default=str)
            simple = "${" not in unresolved and '"???"' not in unresolved
            self._composed[groups] = _Composed(cfg, self._to_dict(cfg, groups) if simple else None)
        return self._composed[groups]

    @staticmethod
    def _to_dict(cfg: DictConfig, overrides: Sequence[str]) -> dict[str, Any]:
        try:
            values = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
        except OmegaConfBaseException as exc:
            raise GridError(f"{' '.join(overrides) or '(defaults)'}: {one_line(exc)}") from exc
        assert isinstance(values, dict)
        return values

    @staticmethod
    def _fast_apply(composed: _Composed, plain: Sequence[Override]) -> dict[str, Any] | None:
        """A copy of the resolved config with plain `key=value` overrides of existing leaves set;
        None when any override needs Hydra's full treatment (+, ++, ~, dicts, interpolations)."""
        if composed.resolved is None:
            return None
        values = dict(composed.resolved)
        for override in plain:
            value = override.value()
            if override.type is not OverrideType.CHANGE or isinstance(value, dict) or "${" in repr(value):
                return None
            *parents, leaf = override.key_or_group.split(".")
            node = values
            for key in parents:  # copy the dicts on the path; the rest is shared, never written
                if not isinstance(node.get(key), dict):
                    return None
                node[key] = node = dict(node[key])
            if leaf not in node or isinstance(node[leaf], dict):
                return None
            node[leaf] = copy.deepcopy(value)
        return values


def expand(
    overrides: Sequence[str], config_dir: Path = CONF_DIR, config_dirs: Sequence[Path | str] = ()
) -> Grid:
    """Expand command-line overrides into the grid of cells; raises GridError on bad input.
    `config_dirs`: a site's own config directories, searched after `config_dir` (--config-dir)."""
    try:
        dirs = search_dirs(config_dirs, config_dir)
    except ConfigDirError as exc:
        raise GridError(str(exc)) from None
    if problem := refused(overrides, group_values(dirs).get("cluster", [])):
        raise GridError(problem)
    searchpath = search_path_override(dirs[1:], overrides)
    if searchpath:
        overrides = [o for o in overrides if o.split("=", 1)[0].lstrip("+") != "hydra.searchpath"]
    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
            loader = GlobalHydra.instance().config_loader()
            # The multirun "master" config: experiment and plain overrides applied, sweeps not yet.
            master = loader.load_configuration(
                CONFIG_NAME, [*searchpath, *overrides], run_mode=RunMode.MULTIRUN
            )
            if master.hydra.searchpath:  # --config-dir, or the user's own: for the cells' compositions too
                extend_search_path(loader, list(master.hydra.searchpath))
            params = master.hydra.sweeper.params or {}
            # As BasicSweeper.sweep: sweeper params first, so a command-line override of the
            # same key replaces them (split_arguments keys its product by override key).
            arguments = [f"{k}={v}" for k, v in params.items()]
            arguments += list(OmegaConf.to_container(master.hydra.overrides.task, resolve=False))
            parsed = OverridesParser.create(config_loader=loader).parse_overrides(arguments)
            batches = split_sweep(parsed)

            composer = _Composer(loader, master, known=job_overrides(parsed))
            cells: dict[str, Cell] = {}
            for batch in batches:
                values = composer.cell_values(batch)
                cell = Cell(cell_id=values["cell_id"], overrides=tuple(batch), config=values)
                cells.setdefault(cell.cell_id, cell)  # `steps=10,10` gives one cell, not two

            sweep_dir = _sweep_dir(master, overrides)
    except GridError:
        raise
    except (HydraException, OmegaConfBaseException) as exc:
        raise GridError(moved_key(str(exc)) or one_line(exc)) from exc
    # One sweep, one executor: the cluster is not an axis (and not part of the cell id).
    clusters = {json.dumps(c.config.get("cluster"), sort_keys=True) for c in cells.values()}
    if len(clusters) > 1:
        raise GridError("the cluster differs between cells; sweep one cluster at a time")
    cluster = json.loads(clusters.pop()) or {}
    try:  # an environment the profile does not define: refused before anything is written
        check_cell_environments(cluster, (cell.config.get("environment") for cell in cells.values()))
    except ProfileError as exc:
        raise GridError(str(exc)) from None
    return Grid(cells=list(cells.values()), sweep_dir=sweep_dir, cluster=cluster)


#: What `sweep --smoke` appends to the user's overrides (a later override of a key wins, also over
#: an experiment's sweeper params): every cell at the tiny size for a couple of steps, on whatever
#: device this machine has, as one process (a distributed cell needs its Slurm tasks), unpaired
#: (six pairs of blocks would be 60 steps, not 2), once (not `repeats` times, nor until decided).
#: Sizes and process counts collapse into one cell; everything else stays swept.
SMOKE_OVERRIDES = (
    "size=tiny",
    "steps=2",
    "warmup_steps=1",
    "measure.min_seconds=0",
    "measure.rel_ci=null",
    "measure.paired=false",
    "repeats=1",
    "batch_size=null",
    "grad_accum=null",
    "device=auto",
    "distributed.nodes=1",
    "distributed.tasks_per_node=1",
)


def smoke_grid(overrides: Sequence[str], config_dirs: Sequence[Path | str] = ()) -> tuple[Grid, Grid]:
    """(the sweep's grid, its smoke grid in SWEEP_DIR/smoke, run by the local executor); the
    sweep's grid is expanded first, so that its bad input fails exactly as it would when submitted.
    The cluster stays as chosen (not `cluster=local`): overrides of its keys must still apply."""
    full = expand(overrides, config_dirs=config_dirs)
    smoke = expand(
        [*overrides, *SMOKE_OVERRIDES, f"hydra.sweep.dir={full.sweep_dir / SMOKE_DIR}"],
        config_dirs=config_dirs,
    )
    return full, replace(smoke, cluster={**smoke.cluster, "executor": "local"})


def _sweep_dir(master: DictConfig, overrides: Sequence[str]) -> Path:
    """`hydra.sweep.dir` if anyone chose it (command line or experiment), else sweeps/<timestamp>."""
    chosen = any(o.startswith("hydra.sweep.dir=") for o in overrides)
    raw = OmegaConf.to_container(master.hydra.sweep, resolve=False).get("dir")
    if not chosen and raw == HYDRA_DEFAULT_SWEEP_DIR:
        path = _default_sweep_dir()
    else:
        path = Path(str(master.hydra.sweep.dir))
    return path if path.is_absolute() else Path(os.getcwd()) / path
