"""The post's layer (`gemm.layer`; workloads/gemm/layer.py, layer_cell.py): the config and its refusals,
the cell ids, the layer's shapes, the windows' arithmetic on made-up kernel intervals, `not_supported`
on the CPU. The `gpu` tests run one layer cell per GEMM implementation on a GPU with fp8 tensor cores
(analysis of layer cells: tests/unit/analysis/test_gemm_layer_tables.py)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from tests.helpers import cli, gemm_config
from workloads.cell.catalog import check_cell
from workloads.cell.cell_id import config_digest
from workloads.cell.config import GEMM_LAYERS, ConfigError
from workloads.cell.config_io import cell_config_from_dict, cell_config_to_dict
from workloads.contract.schema import LAYER_FIELDS, RUN_SCHEMA
from workloads.contract.vocabulary import COMPLETED, GEMM_KERNELS, NOT_SUPPORTED, axes_from_config
from workloads.gemm.layer import LAYERS, LayerWindow, graph_speedup, layer_columns, layer_shapes, way_columns
from workloads.gemm.shapes import GemmShape, gemm_bytes
from workloads.run import run_cell

LAYER = "llama3_70b_attention"


def layer_config(device: str = "cpu", **gemm) -> dict:
    return gemm_config(
        device,
        precision={"name": "fp8", "recipe": "tensorwise"},
        gemm={"layer": LAYER, **gemm},
    )


def test_the_config_s_layers_are_the_layers_built() -> None:
    assert set(GEMM_LAYERS) == set(LAYERS)


def test_the_llama3_70b_attention_layer_s_gemms() -> None:
    """q: 8192 -> 64 heads x 128, k and v: 8192 -> 8 KV heads x 128, o: 8192 -> 8192, at M tokens."""
    shapes = layer_shapes(LAYER, 16)
    assert shapes == [("q", GemmShape(16, 8192, 8192)), ("k", GemmShape(16, 1024, 8192)),
                      ("v", GemmShape(16, 1024, 8192)), ("o", GemmShape(16, 8192, 8192))]  # fmt: skip
    sums = layer_columns([shape for _, shape in shapes], 1979.0, 3350.0)
    assert sums["flops_per_step"] == 2 * 16 * 8192 * (8192 + 1024 + 1024 + 8192)
    assert sums["gemm_bytes"] == sum(gemm_bytes(shape, "fp8", "tensorwise") for _, shape in shapes)
    # Memory-bound at M = 16: each GEMM's bytes at 3,350 GB/s, the weights' 2 x 64 + 2 x 8 MiB most of it.
    assert sums["gemm_floor_us"] == pytest.approx(sums["gemm_bytes"] / 3350e3)
    assert layer_columns([shape for _, shape in shapes], None, 3350.0)["gemm_floor_us"] is None


def test_the_model_section_composes_with_a_layer(tmp_path: Path) -> None:
    """`gemm.layer` composes through Hydra beside one GEMM of the same M: two cells, the layer an axis."""
    shown = cli(tmp_path, "sweep", "model=gemm", "size=small", "precision.name=fp8", "gemm.m=16",
                f"gemm.layer=null,{LAYER}", "gemm.kernel=triton_splitk", "device=cuda", "--dry-run",
                f"hydra.sweep.dir={tmp_path / 'sw'}")  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "2 cell(s)" in shown.stdout and shown.stdout.count(LAYER) == 1 and "| gemm_layer " in shown.stdout


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"gemm": {"layer": "llama3_8b_mlp"}}, "gemm.layer must be one of"),
        ({"model": {"name": "gpt"}, "gemm": {"layer": LAYER}}, "goes with model=gemm"),
        ({"precision": {"name": "bf16"}}, "needs precision.name=fp8 precision.recipe=tensorwise"),
        ({"precision": {"name": "fp8", "recipe": "rowwise"}}, "not fp8/rowwise"),
        ({"backend": {"name": "inductor"}}, "backend=eager, not inductor"),
        ({"gemm": {"layer": LAYER, "n": 4096}}, "gemm.n does not apply"),
    ],
)
def test_layer_refusals_are_one_line(values: dict, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_cell(cell_config_from_dict({**layer_config(), **values}))
    assert says in str(info.value) and "\n" not in str(info.value)


def test_a_layer_cell_for_the_cpu_is_refused_before_submission(tmp_path: Path) -> None:
    shown = cli(tmp_path, "sweep", "model=gemm", "precision.name=fp8", f"gemm.layer={LAYER}", "device=cpu",
                "--dry-run", f"hydra.sweep.dir={tmp_path / 'sw'}")  # fmt: skip
    assert shown.returncode == 2
    assert "precision=fp8 needs a GPU with fp8 tensor cores; this cell asks for device=cpu" in shown.stderr


def test_the_layer_enters_the_cell_id_only_when_set_and_is_an_axis() -> None:
    plain = cell_config_from_dict(gemm_config(precision={"name": "fp8"}))
    older = cell_config_to_dict(plain)  # as written before model.layer existed:
    older["model"].update(older.pop("gemm"))  # the gemm section's keys in model
    del older["model"]["layer"]
    assert config_digest(older) == config_digest(plain)
    layer = cell_config_from_dict(layer_config())
    assert config_digest(layer) != config_digest(plain)
    assert axes_from_config(cell_config_to_dict(layer))["gemm_layer"] == LAYER
    assert axes_from_config(cell_config_to_dict(plain))["gemm_layer"] is None


def test_a_layer_cell_on_the_cpu_is_not_supported_never_failed(tmp_path: Path) -> None:
    assert run_cell(cell_config_from_dict(layer_config()), tmp_path) == NOT_SUPPORTED
    run = pq.read_table(tmp_path / "run.parquet").to_pylist()[0]
    assert "fp8 tensor cores" in run["error"] and run["gemm_layer"] == LAYER
    assert all(run[field.name] is None for field in LAYER_FIELDS)


def test_a_layer_window_s_span_idle_share_and_gaps() -> None:
    """Four kernels of 3, 1, 1 and 3 µs with 10, 12 and 14 µs between them (µs, a trace's unit)."""
    window = LayerWindow.of([(100.0, 103.0), (113.0, 114.0), (126.0, 127.0), (141.0, 144.0)])
    assert window == LayerWindow(span_us=44.0, matmul_us=8.0, gaps_us=[10.0, 12.0, 14.0], kernels=4)
    # Two streams overlapping: the overlap counts once and leaves no gap.
    assert LayerWindow.of([(0.0, 5.0), (2.0, 4.0), (6.0, 7.0)]) == LayerWindow(7.0, 6.0, [0.0, 1.0], 3)
    assert LayerWindow.of([]) is None


def test_a_way_s_columns_and_the_graph_s_speedup() -> None:
    launched = [LayerWindow(44.0, 8.0, [10.0, 12.0, 14.0], 4), LayerWindow(56.0, 8.0, [16.0, 16.0, 16.0], 4)]
    graph = [LayerWindow(10.0, 8.0, [0.5, 1.0, 0.5], 4), LayerWindow(11.0, 8.0, [1.0, 1.0, 1.0], 4)]
    columns = {**way_columns("launched", launched, [30.0, 40.0, 35.0]), **way_columns("graph", graph, [5.0])}
    assert columns["layer_launched_us"] == 50.0 and columns["layer_graph_us"] == 10.5
    assert columns["layer_launched_idle_share"] == pytest.approx(1 - 16 / 100)
    assert columns["layer_graph_idle_share"] == pytest.approx(1 - 16 / 21)
    assert columns["layer_launched_gap_us"] == 15.0 and columns["layer_graph_gap_us"] == 1.0
    assert columns["layer_launched_matmul_us"] == 8.0 and columns["layer_launched_launch_us"] == 35.0
    assert columns["layer_graph_kernels"] == 4
    assert graph_speedup(columns) == pytest.approx(50.0 / 10.5)
    empty = way_columns("graph", [], [])
    assert set(empty) <= set(RUN_SCHEMA.names) and all(value is None for value in empty.values())
    assert graph_speedup({**columns, **empty}) is None


needs_fp8 = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9),
    reason="the layer's fp8 GEMMs need fp8 tensor cores (compute capability >= 8.9)",
)


@pytest.mark.gpu
@needs_fp8
@pytest.mark.parametrize("kernel", [None, *GEMM_KERNELS])
def test_a_layer_cell_launched_and_as_a_graph_on_the_gpu(kernel: str | None, tmp_path: Path) -> None:
    """The post's layer at M = 16: the graph's gaps are smaller than the launched layer's, and the
    launched and the graph layer ran the same kernels."""
    config = layer_config("cuda", kernel=kernel, m=16)
    status = run_cell(cell_config_from_dict({**config, "size": "small", "steps": 20}), tmp_path / "cell")
    run = pq.read_table(tmp_path / "cell" / "run.parquet").to_pylist()[-1]
    print({field.name: run[field.name] for field in LAYER_FIELDS}, run["gemm_kernel"], run["gemm_us"])
    assert status == COMPLETED, run["error"]
    # One kernel per GEMM at the least (cuBLAS may add a split-K reduction), the same in both ways.
    assert run["layer_launched_kernels"] == run["layer_graph_kernels"] >= 4
    assert run["layer_launched_us"] > 0 and run["layer_graph_us"] > 0 and run["gemm_us"] > 0
    assert run["layer_graph_gap_us"] < run["layer_launched_gap_us"]
    assert run["layer_graph_speedup"] == pytest.approx(run["layer_launched_us"] / run["layer_graph_us"])
    assert 0 <= run["layer_graph_idle_share"] < 1 and run["layer_launched_launch_us"] > 0
