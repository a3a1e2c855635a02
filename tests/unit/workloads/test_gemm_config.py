"""The GEMM cell's own config section (`gemm:`, workloads/cell/config.py GemmConfig) and its one upgrade
path (workloads/contract/upgrade.py): the committed packs' GEMM cells, written with `model.m` ...,
keep their ids, read from their config.yaml and re-expanded with `gemm.m=` ...; an old config.yaml
runs as the same cell; an old override or config file is refused in one line that names the new key."""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

import pandas as pd
import pytest
import yaml

from orchestrator.grid.expand import GridError, expand
from tests.helpers import REPO_ROOT, cli, gemm_config
from workloads.cell.cell_id import config_digest
from workloads.cell.config_io import cell_config_from_dict, load_cell_config
from workloads.contract.sweep_dir import read_cell_config
from workloads.contract.vocabulary import COMPLETED, axes_from_config
from workloads.run import main

#: Committed packs of GEMM cells, each written while the GEMM's keys were model.m, model.n, ...
PACKS = {
    "fp8 GEMMs (e86a024)": "docs/results/h200_2026-11-28_fp8_kernels_e86a024/sw_gemm.tar.gz",
    "fp8 layers (e86a024)": "docs/results/h200_2026-11-28_fp8_kernels_e86a024/sw_layer.tar.gz",
    "fp8 GEMMs (e64971f)": "docs/results/h100_2026-11-25_fp8_e64971f/sw_gemm.tar.gz",
}
#: The keys that moved into the gemm section, as a user rewrites an old command.
OLD_SPELLING = re.compile(r"\bmodel\.(m|n|k|kernel|timing|layer)=")


def unpacked(pack: str, into: Path) -> Path:
    """The sweep directory of a committed pack, unpacked under `into`."""
    with tarfile.open(REPO_ROOT / pack) as tar:
        tar.extractall(into, filter="data")
    (manifest,) = into.glob("*/manifest.parquet")
    return manifest.parent


@pytest.mark.parametrize("pack", PACKS.values(), ids=PACKS.keys())
def test_a_committed_pack_s_gemm_cells_keep_their_ids(pack: str, tmp_path: Path) -> None:
    sweep = unpacked(pack, tmp_path)
    configs = sorted(sweep.glob("cells/*/config.yaml"))
    assert configs
    for path in configs:
        written = yaml.safe_load(path.read_text())
        assert "gemm" not in written and written["model"]["m"] is not None  # the old keys
        cell = load_cell_config(path)
        assert config_digest(cell) == written["cell_id"] == path.parent.name
        assert (cell.gemm.m, cell.gemm.n, cell.gemm.k) == tuple(written["model"][key] for key in "mnk")
        axes = axes_from_config(read_cell_config(path.parent, None))
        assert (axes["gemm_m"], axes["gemm_layer"]) == (written["model"]["m"], written["model"].get("layer"))


@pytest.mark.parametrize("pack", list(PACKS.values())[:2], ids=list(PACKS)[:2])
def test_a_committed_sweep_re_expanded_with_the_new_keys_finds_its_cells(pack: str, tmp_path: Path) -> None:
    """Each cell's recorded overrides, `model.m=` written `gemm.m=`, expand to the cell's own id:
    a re-run of the sweep with today's spelling finds its finished cells."""
    manifest = pd.read_parquet(unpacked(pack, tmp_path / "pack") / "manifest.parquet")
    for cell_id, overrides in zip(manifest["cell_id"], manifest["overrides"]):
        rewritten = OLD_SPELLING.sub(r"gemm.\1=", overrides)
        assert rewritten != overrides
        (cell,) = expand([*rewritten.split(" "), f"hydra.sweep.dir={tmp_path / 'sweep'}"]).cells
        assert cell.cell_id == cell_id, rewritten


def test_an_old_config_yaml_runs_as_the_same_cell(tmp_path: Path) -> None:
    """A GEMM cell's config.yaml as written before the gemm section, run by `python -m workloads.run`."""
    old = {**gemm_config(), "model": {"name": "gemm", "m": 32, "n": 16, "k": 8, "timing": "sustained"}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(old))
    assert main([str(path)]) == 0
    (run,) = pd.read_parquet(tmp_path / "run.parquet").to_dict("records")
    assert run["status"] == COMPLETED
    assert (run["gemm_m"], run["gemm_n"], run["gemm_k"]) == (32, 16, 8)
    today = cell_config_from_dict(gemm_config(gemm={"m": 32, "n": 16, "k": 8}))
    assert run["cell_id"] == config_digest(today)


@pytest.mark.parametrize("key", ["m", "k", "kernel", "timing", "layer"])
def test_an_old_override_is_refused_with_the_new_key(key: str) -> None:
    value = {"kernel": "triton_base", "timing": "burst", "layer": "llama3_70b_attention"}.get(key, "16")
    with pytest.raises(GridError) as info:
        expand(["model=gemm", f"model.{key}={value}"])
    assert str(info.value) == f"model.{key} is now gemm.{key}: write gemm.{key}=VALUE"


def test_an_old_key_in_a_user_s_config_file_is_refused_in_one_line(tmp_path: Path) -> None:
    experiment = tmp_path / "conf" / "experiment" / "mine.yaml"
    experiment.parent.mkdir(parents=True)
    experiment.write_text("# @package _global_\nmodel:\n  name: gemm\n  kernel: triton_splitk\n")
    shown = cli(tmp_path, "sweep", "--config-dir", str(tmp_path / "conf"), "+experiment=mine", "--dry-run")
    assert shown.returncode == 2
    assert shown.stderr.strip().splitlines() == [
        "error: +experiment=mine: model.kernel is now gemm.kernel: write gemm.kernel=VALUE"
    ]
