"""A cell's id: `config_digest`, a stable digest of its normalised config (docs/architecture.md "The
sweep directory"). The sweep's own settings (`repeats`, ...) are no part of it, and neither is what
was added after cells existed, at its default, nor where a key moved to: a re-run of an older sweep
finds its finished cells.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from workloads.cell.config import CellConfig, CompileConfig, DistributedConfig, MeasureConfig, PrecisionConfig
from workloads.cell.config_io import cell_config_to_dict
from workloads.contract.upgrade import as_first_written
from workloads.contract.vocabulary import SUSTAINED


@functools.cache
def _later_section_defaults() -> dict[str, dict[str, Any]]:
    """The sections added after cells existed, at their defaults (built once: a sweep digests every cell)."""
    return {
        "distributed": cell_config_to_dict(DistributedConfig()),
        "measure": cell_config_to_dict(MeasureConfig()),
        "compile": cell_config_to_dict(CompileConfig()),
    }


#: Keys added to a section after cells existed, with the value at which they stay out of the digest.
_LATER_KEYS: dict[str, dict[str, Any]] = {
    "model": {
        "target": None,
        "m": None,
        "n": None,
        "k": None,
        "kernel": None,
        "timing": SUSTAINED,
        "layer": None,
    },
    "precision": {"recipe": PrecisionConfig.recipe},
    "measure": {
        k: getattr(MeasureConfig, k) for k in ("paired", "block_seconds", "block_steps", "min_pairs")
    },
}


#: Top-level keys added after cells existed, with the value at which they stay out of the digest.
_LATER_TOP_LEVEL_KEYS: dict[str, Any] = {"environment": None}


@functools.cache
def _sweep_settings() -> tuple[str, ...]:
    """The names of the fields marked SWEEP_SETTING."""
    return tuple(f.name for f in dataclasses.fields(CellConfig) if f.metadata.get("sweep_setting"))


def config_digest(cfg: CellConfig | Mapping[str, Any]) -> str:
    """A stable 12-hex-digit id of a resolved config (the `cell_id` field and the sweep's own settings
    excluded)."""
    values = cell_config_to_dict(cfg) if isinstance(cfg, CellConfig) else dict(cfg)
    for name in ("cell_id", *_sweep_settings()):
        values.pop(name, None)
    values = as_first_written(values)  # the `gemm` section's keys in `model`, where they were first
    # Sections (`distributed`, `measure`, `compile`) and keys added after cells existed are left out at
    # their defaults, so that re-running an older sweep still finds its completed cells.
    for section, defaults in _later_section_defaults().items():
        if values.get(section) == defaults:
            del values[section]
    for key, default in _LATER_TOP_LEVEL_KEYS.items():  # and top-level keys (`environment`)
        if key in values and values[key] == default:
            del values[key]
    for section, keys in _LATER_KEYS.items():  # likewise keys added to a section (model.target)
        if isinstance(part := values.get(section), Mapping):
            values[section] = {k: v for k, v in part.items() if not (k in keys and v == keys[k])}
    blob = json.dumps(values, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]
