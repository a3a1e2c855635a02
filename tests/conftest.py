"""Fixtures shared by several test modules: real cells on the CPU, real data files, the real
workload command line, a machine without Slurm. The local Slurm's fixtures come from the plugin
tests/helpers/slurm/fixtures.py (`pytest_plugins` below); the helpers that test modules import are in
tests/helpers/. A fixture that one module alone uses stays in that module.

Compiling is what costs time here (inductor builds C++ on the CPU), so a cell is run at most
once per session: `tiny_cells.get(...)` runs `run_cell` the first time a configuration is
asked for and hands the same result to every later test, in any module, that asks again.
"""

from __future__ import annotations

import copy
import json
import os
import pickle
import random
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from PIL import Image

from tests.helpers import REPO_ROOT, make_venv, path_without_slurm

#: The local Slurm's fixtures (`slurm_clusters`, `slurm_cluster`, `slurm_cluster_accounting`) and
#: their autouse guard, for every test module.
pytest_plugins = ["tests.helpers.slurm.fixtures"]


#: What every test cell has unless it says otherwise: tiny, fp32 (so that backends can be
#: compared number for number), a few steps on the CPU.
TINY_CELL: dict[str, Any] = {
    "size": "tiny",
    "precision": {"name": "fp32"},
    "device": "cpu",
    "steps": 6,
    "warmup_steps": 2,
    "seed": 1337,
    # exactly `steps` measured steps, unpaired (tests/unit/workloads/test_paired_loop.py measures paired
    # cells)
    "measure": {"min_seconds": 0.0, "paired": False},
}


def merge(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `overrides` applied, nested mappings merged key by key."""
    out = copy.deepcopy(dict(base))
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def tiny_config(model: str, backend: str = "eager", /, **overrides: Any) -> dict[str, Any]:
    """The config dict of a tiny CPU cell; `backend` is the name, `overrides` any other keys
    (nested: `backend={"regional": True}` keeps the name)."""
    return merge(merge(TINY_CELL, {"model": {"name": model}, "backend": {"name": backend}}), overrides)


@dataclass
class CellResult:
    """What one cell directory holds after a run: every attempt's run row and step rows."""

    cell_dir: Path
    status: str | None = None
    """`run_cell`'s return value (None when the cell was run through the command line)."""

    @property
    def runs(self) -> list[dict[str, Any]]:
        return pq.read_table(self.cell_dir / "run.parquet").to_pylist()

    @property
    def run(self) -> dict[str, Any]:
        """The run row of the last attempt."""
        return self.runs[-1]

    @property
    def steps(self) -> list[dict[str, Any]]:
        return pq.read_table(self.cell_dir / "steps.parquet").to_pylist()

    def assert_exact_schemas(self) -> None:
        """Both files have exactly the schema of the Parquet contract (names, order, types)."""
        from workloads.contract.schema import RUN_SCHEMA, STEPS_SCHEMA

        for name, schema in (("steps.parquet", STEPS_SCHEMA), ("run.parquet", RUN_SCHEMA)):
            written = pq.read_schema(self.cell_dir / name).remove_metadata()
            assert written.equals(schema), f"{name}:\n{written}\n!=\n{schema}"

    def losses(self, attempt: int | None = None) -> list[float]:
        """The loss of every step (warm-up included) of one attempt, the last by default."""
        attempt = attempt or self.run["attempt"]
        rows = sorted((s for s in self.steps if s["attempt"] == attempt), key=lambda s: s["step"])
        return [s["loss"] for s in rows]


class TinyCells:
    """Runs each distinct cell configuration once per session, in this process."""

    def __init__(self, root: Path):
        self.root = root
        self.results: dict[str, CellResult] = {}

    def get(self, model: str, backend: str = "eager", /, **overrides: Any) -> CellResult:
        from workloads.cell.config_io import cell_config_from_dict
        from workloads.run import run_cell

        values = tiny_config(model, backend, **overrides)
        key = json.dumps(values, sort_keys=True)
        if key not in self.results:
            cell_dir = self.root / f"cell{len(self.results):03d}"
            status = run_cell(cell_config_from_dict(values), cell_dir)
            self.results[key] = CellResult(cell_dir, status)
        return self.results[key]


@pytest.fixture(scope="session")
def tiny_cells(tmp_path_factory: pytest.TempPathFactory) -> TinyCells:
    return TinyCells(tmp_path_factory.mktemp("cells"))


@pytest.fixture(scope="session", name="tiny_config")
def tiny_config_fixture():
    """The `tiny_config` helper: config dicts for cells run through the command line."""
    return tiny_config


@dataclass
class CliRun:
    proc: subprocess.CompletedProcess
    cell: CellResult


def start_cli(
    config: Mapping[str, Any] | str, cell_dir: Path, env: Mapping[str, str | None] | None = None
) -> tuple[subprocess.Popen, CellResult]:
    """Start `python -m workloads.run CELL_DIR/config.yaml` as a Slurm job runs it; `config` is
    a dict (written as YAML) or the text of the file; `env` sets (or, with None, unsets)
    environment variables."""
    cell_dir.mkdir(parents=True, exist_ok=True)
    path = cell_dir / "config.yaml"
    path.write_text(config if isinstance(config, str) else yaml.safe_dump(dict(config)))
    environment = {**os.environ, **(env or {})}
    environment = {key: value for key, value in environment.items() if value is not None}
    proc = subprocess.Popen(
        [sys.executable, "-m", "workloads.run", str(path)],
        cwd=REPO_ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, CellResult(cell_dir)


def run_cli(
    config: Mapping[str, Any] | str,
    cell_dir: Path,
    env: Mapping[str, str | None] | None = None,
    timeout: float = 300,
) -> CliRun:
    """Run the command line to its end; the result holds the process and the cell directory."""
    proc, cell = start_cli(config, cell_dir, env)
    stdout, stderr = proc.communicate(timeout=timeout)
    return CliRun(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), cell)


@pytest.fixture(scope="session")
def workloads_cli():
    """The `run_cli` helper, for tests that need the command line and its exit code."""
    return run_cli


@pytest.fixture(scope="session")
def workloads_cli_start():
    """The `start_cli` helper, for tests that signal the running process."""
    return start_cli


@dataclass(frozen=True)
class Venvs:
    """Virtual environments made once per session for the tests of `environment=` to name (several
    names may share one): two that share this Python's torch, one without torch. Read only."""

    one: Path
    two: Path
    bare: Path


@pytest.fixture(scope="session")
def venvs(tmp_path_factory: pytest.TempPathFactory) -> Venvs:
    root = tmp_path_factory.mktemp("venvs")
    return Venvs(
        make_venv(root / "one"), make_venv(root / "two"), make_venv(root / "bare", share_torch=False)
    )


@pytest.fixture
def no_slurm_here(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A machine without Slurm (a laptop), whatever this one has: no sinfo or squeue on PATH,
    so the plan is the profile's alone. Runs in tmp_path."""
    monkeypatch.setenv("PATH", path_without_slurm())
    monkeypatch.chdir(tmp_path)


# --- data the tests make -------------------------------------------------------------------

#: Words of the char-level corpus; "é" and "—" make sure characters, not bytes, are counted.
WORDS = ("the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "café", "—", "it", "was", "red")


@pytest.fixture(scope="session")
def char_text_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A few KB of text in nanoGPT's shakespeare_char style: one UTF-8 file, learnable structure."""
    rng = random.Random(0)
    lines = [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 9))).capitalize() + "." for _ in range(200)
    ]
    path = tmp_path_factory.mktemp("text") / "input.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert 3000 < path.stat().st_size < 20000
    return path


#: Vocabulary written into meta.pkl beside the token file; smaller than the tiny preset's 65.
BIN_VOCAB = 50


@pytest.fixture(scope="session")
def token_bin_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """nanoGPT's prepared format: `train.bin` (uint16 token ids) with `meta.pkl` beside it."""
    directory = tmp_path_factory.mktemp("bin")
    tokens = np.random.default_rng(0).integers(0, BIN_VOCAB, size=20_000).astype(np.uint16)
    tokens.tofile(directory / "train.bin")
    with open(directory / "meta.pkl", "wb") as fh:
        pickle.dump({"vocab_size": BIN_VOCAB, "itos": {i: str(i) for i in range(BIN_VOCAB)}}, fh)
    return directory / "train.bin"


def write_image_folder(root: Path, classes: int = 2, per_class: int = 8, size: int = 80) -> Path:
    """`root/<class>/<n>.jpg`: real JPEG files of random noise, written by PIL."""
    rng = np.random.default_rng(0)
    for c in range(classes):
        (root / f"class{c}").mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 256, size=(size, size, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / f"class{c}" / f"{i}.jpg", quality=90)
    return root


@pytest.fixture(scope="session")
def jpeg_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_image_folder(tmp_path_factory.mktemp("images") / "train")


@pytest.fixture(scope="session")
def gpt_param_count():
    """nanoGPT's parameter count of the tiny GPT for a vocabulary, computed from the
    architecture: the tied token embedding (V·C), per block two bias-free LayerNorm weights and
    12·C² of attention and MLP matrices (qkv 3C², proj C², fc 4C², proj 4C²), the final
    LayerNorm; position embeddings excluded as nanoGPT does."""
    from workloads.models.gpt import GPT_SIZES

    layers, width = GPT_SIZES["tiny"].n_layer, GPT_SIZES["tiny"].n_embd
    return lambda vocab_size: vocab_size * width + layers * (12 * width * width + 2 * width) + width
