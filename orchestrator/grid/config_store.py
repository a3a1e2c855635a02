"""The defaults of a cell's config, registered with Hydra's ConfigStore from the workload's dataclasses.

`conf/config.yaml` composes `cell_defaults` first: every key a cell has, at the default that its
dataclass in workloads/cell/config.py gives, so that each default is stated once and changing it
is one edit. The config groups (conf/model/, conf/backend/, ...) state only what differs
(tests/unit/workloads/test_config_defaults.py checks both).

The node is a plain one, not a structured config: OmegaConf would store an int given to a float key
(`measure.min_seconds=0`) as 0.0, which the cell id (a digest of the values) would see, and the
workload checks the types itself, since it runs where OmegaConf is not installed.
"""

from __future__ import annotations

from typing import Any

from hydra.core.config_store import ConfigStore

from workloads.cell.config import CellConfig
from workloads.cell.config_io import cell_config_to_dict

#: The name of the node in the root config's defaults list.
CELL_DEFAULTS = "cell_defaults"

#: Keys each model group states itself: `???` where a model needs it (model=timm's arch,
#: model=custom's target), which a default merged beneath would hide (OmegaConf keeps a value that
#: `???` is merged onto); `target` only where it means something (`+model.target=` with model=gpt
#: is refused by name).
MODEL_GROUP_KEYS = ("arch", "target")


def cell_defaults() -> dict[str, Any]:
    """Every key of a cell's config at its dataclass default, but `cell_id` (the orchestrator gives
    it) and the MODEL_GROUP_KEYS."""
    values = cell_config_to_dict(CellConfig())
    del values["cell_id"]
    values["model"] = {k: v for k, v in values["model"].items() if k not in MODEL_GROUP_KEYS}
    return values


# Registered on import, as Hydra's structured-config apps do: every composition of `conf/` (the
# sweep's, and the tests' own through Hydra's compose API) imports the orchestrator first.
ConfigStore.instance().store(name=CELL_DEFAULTS, node=cell_defaults())
