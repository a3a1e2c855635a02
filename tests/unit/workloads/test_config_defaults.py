"""One source for each default of a cell's config: the dataclasses of workloads/cell/config.py.

orchestrator/grid/config_store.py registers them with Hydra's ConfigStore as `cell_defaults`, which
conf/config.yaml composes first; the YAML states only the group choices, and each group file only
what differs. These tests fail when two places state a default, or disagree about one.

Fast: Hydra composition only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict

from orchestrator.grid.config_groups import ROOT_FILE, default_choices
from orchestrator.grid.config_store import MODEL_GROUP_KEYS, cell_defaults
from orchestrator.grid.expand import CONF_DIR, expand
from workloads.cell.config import CellConfig
from workloads.cell.config_io import cell_config_to_dict

#: Config group -> the section of CellConfig its files fill (None: the top level, `size`).
GROUP_SECTIONS = {"model": "model", "backend": "backend", "precision": "precision", "size": None}


def composed_defaults() -> dict[str, Any]:
    """conf/config.yaml as Hydra composes it with no override, without `hydra` and `cluster`."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config")
    with open_dict(cfg):
        cfg.pop("hydra", None)  # compose() leaves it out unless asked
        cfg.pop("cluster")
    return OmegaConf.to_container(cfg, resolve=False)


def group_files() -> list[Path]:
    return sorted(path for group in GROUP_SECTIONS for path in (CONF_DIR / group).glob("*.yaml"))


def test_the_root_config_states_only_the_group_choices() -> None:
    raw = yaml.safe_load((CONF_DIR / ROOT_FILE).read_text())
    assert list(raw) == ["defaults"], f"conf/{ROOT_FILE} restates {sorted(set(raw) - {'defaults'})}"
    assert raw["defaults"][0] == "cell_defaults", "the dataclass defaults come first, under every group"


def test_the_composed_defaults_are_the_dataclass_defaults() -> None:
    """Every leaf of the default composition is CellConfig's default, or what the root's default
    choices (model: gpt, ...) state, which differs from it (test_a_group_file_states_only_what_differs)."""
    expected = cell_config_to_dict(CellConfig())
    del expected["cell_id"]
    del expected["model"]["target"]  # only model=custom has one
    for group, choice in default_choices().items():
        if group in GROUP_SECTIONS:
            stated = yaml.safe_load((CONF_DIR / group / f"{choice}.yaml").read_text())
            section = GROUP_SECTIONS[group]
            (expected if section is None else expected[section]).update(stated)
    assert composed_defaults() == expected


def test_the_root_choices_agree_with_the_dataclass_names() -> None:
    defaults = cell_config_to_dict(CellConfig())
    choices = default_choices()
    for group, section in GROUP_SECTIONS.items():
        name = defaults["size"] if section is None else defaults[section]["name"]
        assert choices[group] == name, f"conf/{ROOT_FILE} picks {group}: {choices[group]}, CellConfig {name}"


@pytest.mark.parametrize("path", group_files(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_group_file_states_only_what_differs(path: Path) -> None:
    """A key at its dataclass default is left to `cell_defaults`; the file's own name (its
    choice) and the keys each model group states (MODEL_GROUP_KEYS) are no restatement."""
    raw = yaml.safe_load(path.read_text())
    section = GROUP_SECTIONS[path.parent.name]
    values = raw if section is None else raw.get(section, raw)
    own = "size" if section is None else "name"
    assert values.pop(own) == path.stem, f"{path.name}: its {own} must be its file name"
    defaults = cell_defaults() if section is None else cell_defaults()[section]
    exempt = MODEL_GROUP_KEYS if section == "model" else ()
    unknown = sorted(set(values) - set(defaults) - set(exempt))
    assert not unknown, f"{path.name}: keys CellConfig does not have: {unknown}"
    restated = sorted(k for k, v in values.items() if k not in exempt and v == defaults[k])
    assert not restated, f"{path.name} restates the dataclass default of {restated}"


def test_every_group_composes_every_key() -> None:
    """A group that states less still composes to every key of each section, at its default."""
    for overrides in (["backend=inductor"], ["model=resnet", "precision=fp32"]):
        (cell,) = expand(overrides).cells
        for section, defaults in cell_defaults().items():
            if isinstance(defaults, dict):
                assert set(defaults) <= set(cell.config[section]), (overrides, section)


def test_an_int_given_to_a_float_key_stays_an_int() -> None:
    """The defaults node is plain, not a structured config: OmegaConf's FloatNode would store
    `measure.min_seconds=0` as 0.0, and the cell id (a digest of the values) would change."""
    (fast,) = expand(["measure.min_seconds=0", "optim.lr=0.5"]).cells
    (slow,) = expand(["measure.min_seconds=0", "++optim.lr=0.5"]).cells  # `++`: Hydra's own path
    for cell in (fast, slow):
        assert type(cell.config["measure"]["min_seconds"]) is int
    assert fast.cell_id == slow.cell_id
