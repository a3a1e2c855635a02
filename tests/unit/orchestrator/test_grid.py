"""Grid expansion, composition of every config file, cell ids, and the `sweep` command line.

Fast: nothing here trains a model. The end-to-end sweep with real workloads is tested elsewhere.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from orchestrator.grid.expand import CONF_DIR, GridError, expand, smoke_grid
from tests.helpers import cli
from workloads.cell.cell_id import config_digest
from workloads.cell.config_io import cell_config_from_dict

#: Config files that cannot stand alone: the extra overrides that make them a runnable cell.
NEEDS = {
    "model/timm": ["model.arch=resnet18"],
    "model/custom": ["model.target=tests.helpers.custom_targets:returns_dict"],
}


def conf_files() -> list[str]:
    """Every `group/name` under conf/ (lightning-hydra-template style: each must compose)."""
    return sorted(f"{p.parent.name}/{p.stem}" for p in CONF_DIR.glob("*/*.yaml"))


@pytest.mark.parametrize("option", conf_files())
def test_every_config_file_composes(option: str) -> None:
    group, name = option.split("/")
    override = f"+{group}={name}" if group in ("experiment", "suite") else f"{group}={name}"
    grid = expand([override, *NEEDS.get(option, [])])
    assert grid.cells
    for cell in grid.cells:
        assert cell.config["cell_id"] == cell.cell_id
        assert "hydra" not in cell.config
        if group != "experiment":
            value = cell.config[group]
            assert (value["name"] if isinstance(value, dict) else value) == name


def test_conf_has_every_group() -> None:
    groups = {option.split("/")[0] for option in conf_files()}
    assert {"model", "size", "backend", "precision", "cluster", "experiment"} <= groups


def test_slurm_profiles_have_the_same_keys() -> None:
    """So that every `cluster.KEY=value` override works whichever profile is chosen: each one
    inherits conf/cluster_base.yaml (tests/unit/orchestrator/test_cluster_profiles.py checks the values)."""
    import yaml

    base = set(yaml.safe_load((CONF_DIR / "cluster_base.yaml").read_text()))
    composed = {p.stem: set(expand([f"cluster={p.stem}"]).cluster) for p in CONF_DIR.glob("cluster/*.yaml")}
    assert len(composed) >= 3 and all(keys == base for keys in composed.values()), composed


def test_defaults_alone_are_one_cell() -> None:
    grid = expand([])
    assert len(grid.cells) == 1
    assert grid.executor == "local"


def test_product_has_stable_distinct_ids() -> None:
    overrides = ["size=tiny,small", "backend=eager,inductor"]
    grid = expand(overrides)
    axes = {(c.axes["size"], c.axes["backend"]) for c in grid.cells}
    assert axes == {("tiny", "eager"), ("tiny", "inductor"), ("small", "eager"), ("small", "inductor")}
    ids = [c.cell_id for c in grid.cells]
    assert len(set(ids)) == 4
    assert all(re.fullmatch(r"[0-9a-f]{12}", i) for i in ids)
    assert [c.cell_id for c in expand(overrides).cells] == ids  # same ids on a second expansion
    # A cell reached through another grid has the same id: it is a hash of the config alone.
    assert expand(["size=small", "backend=inductor"]).cells[0].cell_id in ids


def test_cell_id_ignores_orchestrator_keys() -> None:
    config = expand([]).cells[0].config
    assert expand(["cluster=grete"]).cells[0].cell_id == config["cell_id"]  # the same cell elsewhere
    assert expand([f"seed={config['seed'] + 1}"]).cells[0].cell_id != config["cell_id"]
    # the workload derives the same id from the config file without one
    assert config_digest(cell_config_from_dict({**config, "cell_id": None})) == config["cell_id"]


def test_quickstart_experiment() -> None:
    grid = expand(["+experiment=quickstart"])
    assert sorted(c.axes["backend"] for c in grid.cells) == ["eager", "inductor"]
    for cell in grid.cells:
        cfg = cell.config
        assert (cfg["model"]["name"], cfg["size"], cfg["precision"]["name"]) == ("gpt", "tiny", "fp32")
        assert (cfg["steps"], cfg["warmup_steps"], cfg["device"]) == (10, 3, "cpu")


def test_command_line_wins_over_experiment_params() -> None:
    grid = expand(["+experiment=quickstart", "backend=inductor", "steps=4"])
    assert [(c.axes["backend"], c.config["steps"]) for c in grid.cells] == [("inductor", 4)]


@pytest.mark.parametrize(
    "override, count",
    [
        ("seed=range(1,4)", 3),
        ("size=choice(tiny,small)", 2),
        ("backend=glob(*)", len(list(CONF_DIR.glob("backend/*.yaml")))),
    ],
)
def test_sweep_functions(override: str, count: int) -> None:
    assert len(expand([override]).cells) == count


def test_overrides_are_parsed_once_per_sweep_not_per_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hydra's override parser runs as often for 200 cells as for 2: each cell's overrides come from
    the sweep's one parse (parsing each cell's strings again was ~40% of a dry run's cost per cell)."""
    parsed: list[str] = []
    parse_rule = OverridesParser.parse_rule

    def counting(self: OverridesParser, line: str, rule: str) -> Any:
        parsed.append(line)
        return parse_rule(self, line, rule)

    monkeypatch.setattr(OverridesParser, "parse_rule", counting)
    counts = {}
    for seeds in (1, 100):
        parsed.clear()
        grid = expand(["size=tiny,small", f"seed=range({seeds})", "optim.lr=0.1", "cluster=grete"])
        assert len(grid.cells) == 2 * seeds
        counts[len(grid.cells)] = len(parsed)
    assert counts[200] == counts[2], f"parses for 2 and 200 cells: {counts}; the last: {parsed[-5:]}"


def test_identical_cells_collapse() -> None:
    assert len(expand(["steps=10,10"]).cells) == 1


def test_smoke_grid_is_every_cell_tiny_and_local(tmp_path: Path) -> None:
    overrides = [
        "+experiment=seminar_llm",
        "cluster=grete",
        "distributed.tasks_per_node=1,2",
        f"hydra.sweep.dir={tmp_path}",
    ]
    full, smoke = smoke_grid(overrides)
    assert len(full.cells) == 12 and full.executor == "slurm"
    assert smoke.sweep_dir == tmp_path / "smoke" and smoke.executor == "local"
    # small and medium collapse into tiny, 1 and 2 processes into one; the backends stay swept
    assert sorted(c.label for c in smoke.cells) == sorted(
        f"gpt/tiny/{b}/bf16" for b in ("eager", "cudagraphs", "inductor")
    )
    assert all(
        (c.config["steps"], c.config["warmup_steps"], c.config["device"]) == (2, 1, "auto")
        for c in smoke.cells
    )
    with pytest.raises(GridError, match="Could not find 'backend/nope'"):
        smoke_grid(["backend=nope"])


def test_sweep_dir_choice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert expand(["hydra.sweep.dir=here"]).sweep_dir == tmp_path / "here"
    default = expand([]).sweep_dir
    assert default.parent == tmp_path / "sweeps"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d", default.name)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["backend=nope"], "Could not find 'backend/nope'"),
        (["size=tiny,nope"], "Could not find 'size/nope'"),
        (["size=["], "cannot parse override"),
        (["+experiment=nope"], "Could not find 'experiment/nope'"),
        (["model=timm"], "model.arch"),
        (["backend.mode=turbo"], "backend.mode"),
        (["backend.name=no_such_dynamo_backend"], "unknown backend 'no_such_dynamo_backend'"),
    ],
)
def test_bad_input_is_a_grid_error(overrides: list[str], message: str) -> None:
    with pytest.raises(GridError, match=re.escape(message)) as info:
        expand(overrides)
    assert "\n" not in str(info.value)


def hydra_compose(overrides: list[str], config_dir: Path = CONF_DIR) -> dict:
    """The config Hydra's own compose API makes of these overrides (one job, no sweep)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf, open_dict

    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    with open_dict(cfg):
        cfg.pop("hydra", None)
    return OmegaConf.to_container(cfg, resolve=True)


@pytest.fixture(scope="module")
def conf_with_interpolation(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """conf/ plus an experiment whose value follows another by interpolation."""
    conf = tmp_path_factory.mktemp("conf")
    shutil.copytree(CONF_DIR, conf, dirs_exist_ok=True)
    (conf / "experiment" / "linked.yaml").write_text("# @package _global_\nwarmup_steps: ${steps}\n")
    return conf


@pytest.mark.parametrize(
    "overrides",
    [
        ["size=small", "seed=3"],
        ["+experiment=quickstart", "steps=7", "optim.lr=0.5"],
        ["++optim.lr=0.25", "backend=inductor", "backend.mode=max-autotune"],
        ["~data.workers", "precision=fp32"],
        ["backend=inductor", "++backend.options={max_autotune: true}"],
        ["steps=12", "warmup_steps=${steps}"],
        ["+experiment=linked", "steps=9"],  # warmup_steps follows: 9
    ],
)
def test_cell_config_is_what_hydra_composes(overrides: list[str], conf_with_interpolation: Path) -> None:
    """Groups are composed once per selection and plain overrides applied per cell: the result
    must be Hydra's own composition, whichever way an override is applied."""
    cells = expand(overrides, config_dir=conf_with_interpolation).cells
    assert cells
    for cell in cells:  # an experiment's sweeper params come first in each cell's overrides
        config = {k: v for k, v in cell.config.items() if k != "cell_id"}
        assert config == hydra_compose(list(cell.overrides), conf_with_interpolation), cell.overrides


def test_cells_sharing_a_composition_stay_independent() -> None:
    cells = expand(["backend=eager,inductor", "optim.lr=0.1,0.2", "seed=1,2"]).cells
    assert len(cells) == 8
    for cell in cells:
        overrides = list(cell.overrides)
        assert {k: v for k, v in cell.config.items() if k != "cell_id"} == hydra_compose(overrides), overrides


def test_compositions_sharing_the_cached_defaults_stay_independent() -> None:
    """`cell_defaults` (orchestrator/grid/config_store.py) is loaded once per expansion and merged
    first into every composition: a later composition (backend=inductor) must not change an
    earlier one, which a model with a `???` (timm's arch) copies for each of its cells."""
    overrides = ["model=timm", "model.arch=resnet18,resnet50", "backend=eager,inductor"]  # backend fastest
    cells = expand(overrides).cells
    assert len(cells) == 4
    for cell in cells:
        assert cell.config["backend"]["name"] == cell.override_values()["backend"], cell.overrides
        assert {k: v for k, v in cell.config.items() if k != "cell_id"} == hydra_compose(list(cell.overrides))


@pytest.mark.parametrize("override", ["backend=nope", "size=[", "nokey=1"])
def test_cli_bad_input_exits_2_with_one_line(tmp_path: Path, override: str) -> None:
    result = cli(tmp_path, "sweep", override)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert not any(tmp_path.iterdir())  # nothing written, nothing run


def test_cli_dry_run_prints_the_grid_and_writes_nothing(tmp_path: Path) -> None:
    result = cli(
        tmp_path, "sweep", "size=tiny,small", "--dry-run", "backend=eager,inductor", "hydra.sweep.dir=sw"
    )
    assert result.returncode == 0, result.stderr
    printed = re.findall(r"^\| ([0-9a-f]{12}) \|", result.stdout, flags=re.M)
    assert sorted(printed) == sorted(
        c.cell_id for c in expand(["size=tiny,small", "backend=eager,inductor"]).cells
    )
    assert "4 cell(s)" in result.stdout and "nothing written or run (--dry-run)" in result.stdout
    assert not any(tmp_path.iterdir())  # a local plan has no scripts; no configs, no manifest, no runs


def test_cli_sweep_runs_every_cell_and_skips_completed(tmp_path: Path) -> None:
    # Real cells: a synthetic-data cell that trains, and a cell whose token file is shorter
    # than one block, which fails inside the workload (not at expansion: the file exists).
    short_bin = tmp_path / "short.bin"
    np.arange(10, dtype=np.uint16).tofile(short_bin)
    args = [
        "sweep",
        "data.source=bin,synthetic",
        f"data.path={short_bin}",
        "precision=fp32",
        "device=cpu",
        "steps=2",
        "warmup_steps=1",
        "measure.min_seconds=0",
        "hydra.sweep.dir=sw",
    ]

    first = cli(tmp_path, *args)
    assert first.returncode == 1, first.stderr  # one cell failed, the other still ran
    assert re.search(
        r"\[1/2\] gpt/tiny/eager/\S+ \(\w+\) \.\.\. failed in [\d.]+ s: .*block_size", first.stdout
    )
    assert re.search(r"\[2/2\] gpt/tiny/eager/\S+ \(\w+\) \.\.\. completed in [\d.]+ s", first.stdout)
    # the compact per-cell table follows: the completed cell is its workload's baseline
    table = [line for line in first.stdout.splitlines() if line.startswith("|")]
    assert "| baseline " in first.stdout and "| failed " in first.stdout and "block_size" in first.stdout
    assert len(table) == 4 and max(map(len, table)) <= 160 and "analyze SWEEP_DIR --full" in first.stdout

    second = cli(tmp_path, *args)
    assert "[2/2] gpt/tiny/eager" in second.stdout and "already completed" in second.stdout
    attempts = {len(pd.read_parquet(f)) for f in (tmp_path / "sw").glob("cells/*/run.parquet")}
    assert attempts == {1, 2}  # the failed cell ran again, the completed one did not


def test_cli_smoke_runs_every_cell_tiny_here(tmp_path: Path) -> None:
    args = [
        "sweep",
        "cluster=grete",
        "size=small,medium",
        "backend=eager,aot_eager",
        "precision=fp32",
        "hydra.sweep.dir=sw",
        "--smoke",
    ]
    result = cli(tmp_path, *args)
    assert result.returncode == 0, result.stderr
    assert "smoke: the sweep's 4 cell(s) as 2 tiny cell(s)" in result.stdout
    runs = pd.concat(pd.read_parquet(p) for p in (tmp_path / "sw" / "smoke").glob("cells/*/run.parquet"))
    assert sorted(runs["backend"]) == ["aot_eager", "eager"]
    assert (
        set(runs["status"]) == {"completed"}
        and set(runs["size"]) == {"tiny"}
        and set(runs["measured_steps"]) == {2}
    )
    assert not (tmp_path / "sw" / "cells").exists()  # the sweep itself was neither run nor submitted
    bad = cli(tmp_path, "sweep", "cluster=grete", "cluster.partition=nope", "hydra.sweep.dir=sw2", "--smoke")
    assert (
        bad.returncode == 2 and "unknown partition 'nope'" in bad.stderr and not (tmp_path / "sw2").exists()
    )
