"""A cell's config in and out: a plain mapping or `config.yaml` into the dataclasses of
workloads/cell/config.py (`cell_config_from_dict`, `load_cell_config`), and back into a plain dict
(`cell_config_to_dict`), as written to `config.yaml` and digested into the cell id.

Unknown keys are refused, so that a typo never silently becomes a default; a key that moved is
refused with its new name (`moved_key`), and a stored config.yaml is lifted to the current keys
first (workloads/contract/upgrade.py `lift_config`). Keys the workload does not use (`cluster`,
`hydra`, ...) are allowed at the top level only. The types are checked here, not by OmegaConf: a
Slurm task runs `python -m workloads.run` where no OmegaConf is installed (docs/clusters.md).
"""

from __future__ import annotations

import dataclasses
import functools
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from workloads.cell.config import CellConfig, ConfigError, DistributedConfig
from workloads.cell.validation import validate
from workloads.contract.upgrade import MOVED_CONFIG_KEYS, lift_config

#: Top-level keys that belong to the orchestrator; a workload ignores them.
FOREIGN_TOP_LEVEL_KEYS = frozenset({"cluster", "hydra", "experiment", "executor", "sweep", "suite"})


#: Python types a YAML value may have for each annotated scalar type (an int is a valid float).
_ACCEPTED_TYPES = {int: (int,), float: (int, float), bool: (bool,), str: (str,)}


def _check_type(hint: Any, value: Any, where: str, key: str) -> None:
    """Reject a value of the wrong scalar type (`steps: abc`), naming the key."""
    accepted = _value_types(hint)
    if accepted is None or (
        isinstance(value, accepted) and (bool in accepted or not isinstance(value, bool))
    ):
        return  # bool is an int subclass, but `steps: true` is a mistake
    raise ConfigError(f"config key {where}{key} must be {_type_name(hint)}, got {value!r}")


@functools.cache
def _value_types(hint: Any) -> tuple[type, ...] | None:
    """The Python types a value of `hint` may have (NoneType where it may be null); None where any
    value may be given (a member that is not a scalar type: dict, ...)."""
    members = _union_members(hint)
    if any(m is not type(None) and m not in _ACCEPTED_TYPES for m in members):
        return None
    return tuple(t for m in members for t in _ACCEPTED_TYPES.get(m, (m,)))


@functools.cache
def _union_members(hint: Any) -> tuple[Any, ...]:
    """(int, NoneType) for `int | None`; (hint,) for anything that is not a union."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


def _type_name(hint: Any) -> str:
    names = [getattr(t, "__name__", str(t)) for t in _union_members(hint)]
    return " or ".join("null" if n == "NoneType" else n for n in names)


@functools.cache
def _schema(cls: type) -> dict[str, tuple[type | None, Any]]:
    """{field: (its section's dataclass, None for a value; its type hint)} of a config class. Once
    per class: get_type_hints evaluates the string annotations each call, and a 10,000-cell sweep
    builds a config per cell."""
    hints = typing.get_type_hints(cls)
    return {
        f.name: (f.default_factory if dataclasses.is_dataclass(f.default_factory) else None, hints[f.name])
        for f in dataclasses.fields(cls)
    }


def _build(cls: type, values: Mapping[str, Any], where: str) -> Any:
    # ~100 -> ~50 µs per cell config with the schema and the accepted types looked up once per
    # class and hint (a 10,000-cell dry run builds one per cell).
    schema = _schema(cls)
    kwargs = {}
    for key, value in values.items():
        if key not in schema:
            if not where and key in FOREIGN_TOP_LEVEL_KEYS:
                continue
            raise ConfigError(
                moved_key(f"{where}{key}") or f"unknown config key '{where}{key}'; known: {sorted(schema)}"
            )
        section, hint = schema[key]
        if section is not None:
            if not isinstance(value, Mapping):
                raise ConfigError(f"config key {where}{key} must be a mapping, got {value!r}")
            value = _build(section, value, f"{where}{key}.")
        else:
            _check_type(hint, value, where, key)
        kwargs[key] = value
    return cls(**kwargs)


def moved_key(text: str) -> str | None:
    """The one line that refuses a key which moved (workloads/contract/upgrade.py MOVED_CONFIG_KEYS)
    where `text` (a key, an override, Hydra's error) names one: a stored config.yaml is lifted, but an
    override or a config file of the user's is refused, as Hydra refuses any key it does not know."""
    for old, new in MOVED_CONFIG_KEYS.items():
        if re.search(rf"(?<![\w.]){re.escape(old)}(?!\w)", text):  # gemm.k, not gemm.kernel
            return f"{old} is now {new}: write {new}=VALUE"
    return None


def cell_config_from_dict(values: Mapping[str, Any]) -> CellConfig:
    """Build and validate a CellConfig from a plain (already resolved) mapping."""
    cfg = _build(CellConfig, values, "")
    validate(cfg)
    return cfg


def distributed_section(config: Mapping[str, Any]) -> DistributedConfig:
    """The `distributed` section of a resolved cell config (the defaults where it has none)."""
    return DistributedConfig(**(config.get("distributed") or {}))


def load_cell_config(path: str | Path) -> CellConfig:
    """Read a resolved `config.yaml` written by the orchestrator (or by hand)."""
    with open(path) as fh:
        try:
            values = yaml.safe_load(fh) or {}
        except yaml.YAMLError as err:
            raise ConfigError(f"{path}: not valid YAML: {' '.join(str(err).split())}") from None
    if not isinstance(values, Mapping):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return cell_config_from_dict(lift_config(values))


def cell_config_to_dict(cfg: CellConfig) -> dict[str, Any]:
    """The plain-dict form, as written to `config.yaml` and hashed into the cell id."""
    return _plain(cfg)


@functools.cache
def _field_names(cls: type) -> tuple[str, ...] | None:
    """The field names of a dataclass type; None for any other type."""
    return tuple(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else None


def _plain(value: Any) -> Any:
    # dataclasses.asdict deep-copies every leaf; config leaves are immutable scalars, so this
    # walk gives the same dict several times faster (it runs once per cell of a sweep). Fields
    # are looked up once per type, not per node: 115 -> 50 µs per cell config on a 2-core machine.
    if (names := _field_names(type(value))) is not None:
        return {name: _plain(getattr(value, name)) for name in names}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
