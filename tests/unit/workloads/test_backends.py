"""Every backend trains the tiny GPT and the tiny ResNet on the CPU and writes honest Parquet.

Real `torch.compile` (inductor builds C++ here), real timm models, real Parquet files. Each
cell runs once per session (`tiny_cells`) and every test below reads what it wrote.
"""

from __future__ import annotations

import math
import os
import re
import socket
import statistics
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pytest
import timm
import torch
from torch.utils.flop_counter import FlopCounterMode

from tests.helpers import REPO_ROOT
from workloads.cell.cell_id import config_digest
from workloads.cell.config_io import cell_config_from_dict
from workloads.contract.schema import SCHEMA_VERSION
from workloads.models.gpt import GPT_SIZES
from workloads.models.vision import VISION_SIZES

BACKENDS = ("eager", "inductor", "cudagraphs", "aot_eager", "torchscript")
DYNAMO_BACKENDS = ("inductor", "cudagraphs", "aot_eager")
MODELS = ("gpt", "resnet")

#: (model, backend, overrides): the backend matrix, then regional compilation, a compiled
#: optimizer step and gradient accumulation.
MATRIX = [(model, backend, {}) for model in MODELS for backend in BACKENDS]
VARIANTS = [
    ("gpt", "aot_eager", {"backend": {"regional": True}}),
    ("resnet", "aot_eager", {"backend": {"regional": True}}),
    ("gpt", "inductor", {"backend": {"compile_optimizer": True}}),
    ("resnet", "aot_eager", {"backend": {"compile_optimizer": True}}),
    ("gpt", "aot_eager", {"grad_accum": 2}),
    ("resnet", "eager", {"grad_accum": 2}),
]
CELLS = MATRIX + VARIANTS
SESSION_START = datetime.now(timezone.utc)


def spec_id(spec: tuple) -> str:
    model, backend, overrides = spec
    extra = "-".join(
        f"{k}={v}"
        for key, value in overrides.items()
        for k, v in (value.items() if isinstance(value, dict) else [(key, value)])
    )
    return "-".join(filter(None, (model, backend, extra)))


@dataclass
class Cell:
    model: str
    backend: str
    overrides: dict
    config: dict
    """The config dict the cell ran with."""
    result: Any
    """conftest.CellResult: what the cell wrote."""

    @property
    def backend_option(self) -> dict:
        return self.overrides.get("backend", {})


@pytest.fixture(params=CELLS, ids=[spec_id(spec) for spec in CELLS])
def cell(request, tiny_cells, tiny_config) -> Cell:
    model, backend, overrides = request.param
    return Cell(
        model,
        backend,
        overrides,
        tiny_config(model, backend, **overrides),
        tiny_cells.get(model, backend, **overrides),
    )


def expected_status(cell: Cell) -> str:
    """On the CPU there are no CUDA graphs: a `cudagraphs` cell must say so, not pass as compiled."""
    return "not_compiled" if cell.backend == "cudagraphs" else "completed"


def test_cell_completes_with_exact_parquet_schemas(cell: Cell):
    result = cell.result
    assert result.status == expected_status(cell), result.run["error"]
    assert result.run["status"] == expected_status(cell)
    if expected_status(cell) == "completed":
        assert result.run["error"] is None
    else:
        assert result.run["cudagraph_skips"] >= 1 and "asked for CUDA graphs" in result.run["error"]
    result.assert_exact_schemas()
    assert len(result.runs) == 1 and result.run["attempt"] == 1


def test_warmup_then_measured_steps(cell: Cell):
    run, steps = cell.result.run, cell.result.steps
    warmup, measured = cell.config["warmup_steps"], cell.config["steps"]
    assert [s["step"] for s in steps] == list(range(warmup + measured))
    assert [s["phase"] for s in steps] == ["warmup"] * warmup + ["measure"] * measured
    assert {s["attempt"] for s in steps} == {1} and {s["cell_id"] for s in steps} == {run["cell_id"]}
    assert run["warmup_steps"] == warmup and run["measured_steps"] == measured
    for s in steps:
        assert math.isfinite(s["loss"]) and s["loss"] > 0
        assert s["step_time_ms"] > 0
        assert 0 <= s["data_time_ms"] <= s["step_time_ms"]  # the wait for data is part of the step
        assert s["items"] == run["items_per_step"]
        # achieved TFLOP/s is the step's FLOPs over its time; no peak is known for a CPU
        assert s["tflops"] == pytest.approx(run["flops_per_step"] / (s["step_time_ms"] / 1e3) / 1e12)
        assert s["mfu"] is None


def test_summary_is_over_measured_steps_only(cell: Cell):
    run, steps = cell.result.run, cell.result.steps
    measured = [s["step_time_ms"] for s in steps if s["phase"] == "measure"]
    assert run["median_step_ms"] == pytest.approx(statistics.median(measured))
    assert run["mean_step_ms"] == pytest.approx(statistics.fmean(measured))
    assert run["std_step_ms"] == pytest.approx(statistics.stdev(measured))
    assert run["first_step_ms"] == pytest.approx(steps[0]["step_time_ms"])
    assert run["items_per_s"] == pytest.approx(run["items_per_step"] / (run["median_step_ms"] / 1e3))
    assert run["peak_tflops"] is None and run["mfu"] is None
    if cell.backend == "eager":
        assert run["compile_time_s"] is None  # nothing compiles; the warm-up excess is in first_step_ms
    else:
        assert run["compile_time_s"] >= 0


def test_compiled_cells_prove_they_compiled(cell: Cell):
    run, steps = cell.result.run, cell.result.steps
    if cell.backend == "eager":
        assert run["graph_count"] in (None, 0)
        return
    assert run["graph_count"] >= 1  # dynamo's own count of the graphs it compiled (torchscript: traced)
    if cell.backend in DYNAMO_BACKENDS:
        # The proof is dynamo's and inductor's counters, not timing (a loaded CPU can make a
        # measured step slower than the compiling one): inductor looked its graphs up in the FX
        # graph cache, and the compile time is recorded, at least the first warm-up step's excess.
        if cell.backend == "inductor":
            lookups = (
                run["fx_graph_cache_misses"] + run["fx_graph_cache_hits"] + run["fx_graph_cache_bypasses"]
            )
            assert lookups >= run["graph_count"]
        assert run["compile_time_s"] is not None
        assert (
            run["compile_time_s"] >= max(0.0, steps[0]["step_time_ms"] - run["median_step_ms"]) / 1e3 * 0.999
        )
        if not cell.backend_option.get("compile_optimizer"):
            assert run["graph_break_count"] == 0  # both tiny models trace as whole graphs


def test_run_row_describes_the_cell(cell: Cell):
    run = cell.result.run
    assert run["cell_id"] == config_digest(cell_config_from_dict(cell.config))
    assert (run["model"], run["size"], run["backend"], run["precision"]) == (
        cell.model,
        "tiny",
        cell.backend,
        "fp32",
    )
    assert run["compile_mode"] == ("default" if cell.backend == "inductor" else None)
    assert run["regional"] == bool(cell.backend_option.get("regional"))
    assert run["compile_optimizer"] == bool(cell.backend_option.get("compile_optimizer"))
    assert run["fullgraph"] is False
    assert (run["data_source"], run["seed"], run["device"]) == ("synthetic", cell.config["seed"], "cpu")
    assert run["grad_accum"] == cell.overrides.get("grad_accum", 1)
    assert run["peak_mem_bytes"] > 0


def test_items_params_and_flops(cell: Cell, gpt_param_count):
    run = cell.result.run
    grad_accum = cell.overrides.get("grad_accum", 1)
    if cell.model == "gpt":
        preset = GPT_SIZES["tiny"]
        assert run["arch"] == f"gpt-{preset.n_layer}x{preset.n_head}x{preset.n_embd}"
        assert run["batch_size"] == preset.batch_size
        assert run["items_per_step"] == preset.batch_size * grad_accum * preset.block_size
        assert run["params"] == gpt_param_count(preset.vocab_size)
        # nanoGPT: 6N + 12·L·H·Q·T FLOPs per token (H·Q = n_embd)
        per_token = 6 * run["params"] + 12 * preset.n_layer * preset.n_embd * preset.block_size
        assert run["flops_per_step"] == pytest.approx(per_token * run["items_per_step"])
    else:
        preset = VISION_SIZES["tiny"]
        assert run["arch"] == preset.arch
        assert run["batch_size"] == preset.batch_size
        assert run["items_per_step"] == preset.batch_size * grad_accum
        reference = timm.create_model(preset.arch, pretrained=False, num_classes=1000)
        assert run["params"] == sum(p.numel() for p in reference.parameters())
        # one training step of a CNN costs about three forward passes (backward ~ 2x forward)
        reference.eval()
        with FlopCounterMode(display=False) as counter:
            reference(torch.randn(preset.batch_size, 3, preset.image_size, preset.image_size))
        forward = counter.get_total_flops()
        assert 2.5 * forward * grad_accum < run["flops_per_step"] <= 3.1 * forward * grad_accum


def test_environment_columns(cell: Cell):
    run = cell.result.run
    assert run["torch_version"] == torch.__version__
    assert run["timm_version"] == timm.__version__
    assert run["hostname"] == socket.gethostname()
    assert run["gpu_name"] is None
    assert run["schema_version"] == SCHEMA_VERSION
    assert SESSION_START <= run["started_at"] <= run["finished_at"] <= datetime.now(timezone.utc)
    if os.environ.get("COMPILEBENCH_GIT_SHA"):
        assert run["git_sha"] == os.environ["COMPILEBENCH_GIT_SHA"]
    elif (REPO_ROOT / ".git").exists():
        # the commit checked out when the cell ran (in this repository's history), and whether
        # tracked files differed from it
        sha = re.fullmatch(r"([0-9a-f]{40})(-dirty)?", run["git_sha"] or "")
        assert sha, run["git_sha"]
        ancestor = subprocess.run(["git", "merge-base", "--is-ancestor", sha.group(1), "HEAD"], cwd=REPO_ROOT)
        assert ancestor.returncode == 0


def test_regional_gpt_compiles_its_repeated_block_once(tiny_cells):
    """Regional compilation: the GPT's identical transformer blocks share one compiled graph."""
    run = tiny_cells.get("gpt", "aot_eager", backend={"regional": True}).run
    assert run["regional"] is True
    assert GPT_SIZES["tiny"].n_layer > 1
    assert run["graph_count"] == 1


def test_compiled_optimizer_adds_its_own_graphs(tiny_cells):
    whole = tiny_cells.get("gpt", "inductor").run
    with_optimizer = tiny_cells.get("gpt", "inductor", backend={"compile_optimizer": True}).run
    assert with_optimizer["compile_optimizer"] is True
    assert with_optimizer["graph_count"] > whole["graph_count"]


@pytest.mark.parametrize("model, backend", [("gpt", "aot_eager"), ("resnet", "eager")])
def test_grad_accum_multiplies_items_and_flops(tiny_cells, model, backend):
    single = tiny_cells.get(model, backend).run
    double = tiny_cells.get(model, backend, grad_accum=2).run
    assert double["batch_size"] == single["batch_size"]
    assert double["items_per_step"] == 2 * single["items_per_step"]
    assert double["flops_per_step"] == pytest.approx(2 * single["flops_per_step"])
    assert single["cell_id"] != double["cell_id"]


def test_recompile_count_describes_its_cell_alone(tiny_cells):
    """The ResNet's blocks differ in width, so regional compilation recompiles the block; run
    again in the same process, the cell must report the same number, not the sum."""
    first = tiny_cells.get("resnet", "aot_eager", backend={"regional": True}).run
    again = tiny_cells.get("resnet", "aot_eager", backend={"regional": True}, cell_id="regional-again").run
    assert first["recompile_count"] >= 1
    assert again["recompile_count"] == first["recompile_count"]


@pytest.mark.skipif(not (REPO_ROOT / ".git").exists(), reason="not a git checkout")
def test_git_sha_names_the_commit_of_a_tagged_release(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(clone)], check=True)
    subprocess.run(
        [
            "git",
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.org",
            "tag",
            "-a",
            "v9.9",
            "-m",
            "a release",
        ],
        cwd=clone,
        check=True,
    )
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True, check=True)
    env = {k: v for k, v in os.environ.items() if k != "COMPILEBENCH_GIT_SHA"}
    code = (
        "import torch; from workloads.instruments.environment import describe_environment as d; "
        "print(d(torch.device('cpu'))['git_sha'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=clone, env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == head.stdout.strip()
