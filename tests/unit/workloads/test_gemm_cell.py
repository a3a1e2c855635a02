"""The GEMM cell (model=gemm, workloads/gemm/): its arithmetic against hand computation, a tiny bf16
GEMM run end to end on the CPU through workloads.run, fp8 on the CPU recorded as not_supported,
the refusals, and the fp8_gemm experiment's grid. The GPU tier runs it on a GPU
(tests/gpu/test_gpu_tier.py)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from orchestrator.grid.expand import GridError, expand
from tests.helpers import REPO_ROOT, cli, gemm_config
from workloads.cell.catalog import SIZES, check_cell
from workloads.cell.cell_id import config_digest
from workloads.cell.config import ConfigError
from workloads.cell.config_io import cell_config_from_dict
from workloads.contract.schema import GEMM_FIELDS, RUN_SCHEMA
from workloads.contract.vocabulary import COMPLETED, NOT_SUPPORTED
from workloads.gemm.shapes import (
    GEMM_SIZES,
    GemmShape,
    gemm_bytes,
    gemm_columns,
    gemm_flops,
    resolve_shape,
    roofline,
)
from workloads.gemm.timing import GEMMS_PER_REPLAY
from workloads.run import run_cell

#: The FP8 post's shape: M = 16 tokens of Llama3-70B's attention, N = K = 8192.
POST = GemmShape(16, 8192, 8192)


def test_the_presets_cover_every_size_and_a_dimension_given_wins() -> None:
    assert tuple(GEMM_SIZES) == SIZES
    assert resolve_shape("small", None, None, None) == POST
    assert resolve_shape("small", 1, None, 4096) == GemmShape(1, 8192, 4096)


def test_flops_bytes_and_roofline_against_hand_computation() -> None:
    assert gemm_flops(POST) == 2 * 16 * 8192 * 8192
    # fp8: A and B one byte an element, C in bf16, two fp32 scales (tensorwise) or M + N (rowwise)
    fp8 = 16 * 8192 + 8192 * 8192 + 16 * 8192 * 2
    assert gemm_bytes(POST, "fp8", "tensorwise") == fp8 + 2 * 4
    assert gemm_bytes(POST, "fp8", "rowwise") == fp8 + (16 + 8192) * 4
    assert gemm_bytes(POST, "bf16", "tensorwise") == (16 * 8192 + 8192 * 8192 + 16 * 8192) * 2
    # H100 SXM: 3350 GB/s, 1978.9 dense fp8 TFLOP/s: at M = 16 the weight's read bounds the GEMM
    bound = roofline(gemm_flops(POST), fp8 + 8, 1978.9, 3350.0)
    assert bound is not None and bound.bound == "memory"
    assert bound.floor_us == pytest.approx((fp8 + 8) / 3.35e12 * 1e6)  # ~20.2 µs
    square = GemmShape(8192, 8192, 8192)
    bound = roofline(gemm_flops(square), gemm_bytes(square, "fp8", "tensorwise"), 1978.9, 3350.0)
    assert bound.bound == "compute" and bound.floor_us == pytest.approx(2 * 8192**3 / 1978.9e12 * 1e6)
    assert roofline(1.0, 1, None, 3350.0) is None and roofline(1.0, 1, 1978.9, None) is None


def test_the_columns_of_a_measured_gemm() -> None:
    columns = gemm_columns(POST, "fp8", "tensorwise", 0.040, 1978.9, 3350.0)  # 40 µs per GEMM
    nbytes = gemm_bytes(POST, "fp8", "tensorwise")
    assert columns["gemm_us"] == pytest.approx(40.0)
    assert columns["gemm_tflops"] == pytest.approx(2 * 16 * 8192 * 8192 / 40e-6 / 1e12)
    assert columns["gemm_gbps"] == pytest.approx(nbytes / 40e-6 / 1e9)
    assert columns["gemm_roofline_share"] == pytest.approx(nbytes / 3.35e12 * 1e6 / 40.0)
    assert columns["gemm_bound"] == "memory" and columns["peak_gbps"] == 3350.0
    on_cpu = gemm_columns(POST, "bf16", "tensorwise", 0.040, None, None)
    assert on_cpu["gemm_floor_us"] is None and on_cpu["gemm_roofline_share"] is None
    assert gemm_columns(POST, "bf16", "tensorwise", None, None, None)["gemm_us"] is None


def test_the_gemm_columns_are_in_the_run_schema() -> None:
    names = {
        "gemm_us",
        "gemm_tflops",
        "gemm_bytes",
        "gemm_gbps",
        "peak_gbps",
        "gemm_floor_us",
        "gemm_roofline_share",
        "gemm_bound",
        "gemm_kernel",
        "gemm_autotune_us",
        "gemms_per_replay",
        "sm_clock_mhz",
        "clock_samples",
        "clock_limits",
    }
    assert {field.name for field in GEMM_FIELDS} == names
    assert names | {"gemm_m", "gemm_n", "gemm_k", "gemm_timing"} <= set(RUN_SCHEMA.names)


def test_a_tiny_bf16_gemm_runs_end_to_end_on_the_cpu(tmp_path: Path) -> None:
    cfg = cell_config_from_dict(gemm_config(gemm={"m": 32}))
    assert run_cell(cfg, tmp_path) == COMPLETED
    run = pq.read_table(tmp_path / "run.parquet").to_pylist()[0]
    assert (run["model"], run["gemm_m"], run["gemm_n"], run["gemm_k"]) == ("gemm", 32, 64, 64)
    assert run["gemm_us"] == pytest.approx(run["median_step_ms"] * 1e3) and run["gemm_us"] > 0
    assert run["gemm_tflops"] == pytest.approx(2 * 32 * 64 * 64 / (run["gemm_us"] / 1e6) / 1e12)
    assert run["gemm_bytes"] == (32 * 64 + 64 * 64 + 32 * 64) * 2 and run["gemm_gbps"] > 0
    assert run["gemm_kernel"] == "aten" and run["gemm_autotune_us"] is None
    assert run["gemm_floor_us"] is None and run["gemm_bound"] is None  # no peaks on the CPU
    assert run["gemms_per_replay"] == GEMMS_PER_REPLAY and run["items_per_step"] == 1
    assert run["flops_per_step"] == 2 * 32 * 64 * 64
    assert run["paired"] is False and "GEMM" in run["paired_fallback"]
    assert run["torch_version"] and run["cpu_model"] is not None
    steps = pq.read_table(tmp_path / "steps.parquet").to_pylist()
    assert [s["phase"] for s in steps] == ["warmup"] * 2 + ["measure"] * 5
    assert all(s["step_time_ms"] > 0 and s["items"] == 1 for s in steps)


def test_a_compiled_gemm_records_its_compile(tmp_path: Path) -> None:
    cfg = cell_config_from_dict(gemm_config(backend={"name": "inductor"}))
    assert run_cell(cfg, tmp_path) == COMPLETED
    run = pq.read_table(tmp_path / "run.parquet").to_pylist()[0]
    assert run["graph_count"] == 1 and run["compile_time_s"] > 0 and run["gemm_us"] > 0


def test_fp8_on_the_cpu_is_not_supported_never_failed(tmp_path: Path) -> None:
    cfg = cell_config_from_dict(gemm_config(precision={"name": "fp8", "recipe": "rowwise"}))
    assert run_cell(cfg, tmp_path) == NOT_SUPPORTED
    run = pq.read_table(tmp_path / "run.parquet").to_pylist()[0]
    assert run["status"] == NOT_SUPPORTED and "fp8 tensor cores" in run["error"]


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"data": {"source": "text", "path": str(REPO_ROOT / "README.md")}}, "data.source=text does not fit"),
        ({"precision": {"name": "fp8", "recipe": "rowwise_with_gw_hp"}}, "has no weight gradient"),
        ({"precision": {"name": "fp32"}}, "not precision=fp32"),
        ({"distributed": {"tasks_per_node": 2}}, "runs in one process, not 2"),
        ({"backend": {"name": "torchscript"}}, "no torchscript"),
        ({"compile": {"measure": "cold_warm"}}, "compile.measure=once"),
        ({"model": {"name": "gpt"}, "gemm": {"m": 16}}, "gemm.m=16: the gemm section is a GEMM cell's"),
        ({"gemm": {"k": 0}}, "gemm.k must be positive"),
        ({"batch_size": 64}, "model=gemm has no batch_size: its shape is gemm.m"),
        ({"grad_accum": 2}, "model=gemm has no grad_accum"),
    ],
)
def test_refusals_are_one_line_config_errors(values: dict, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_cell(cell_config_from_dict(gemm_config(**values)))
    assert says in str(info.value) and "\n" not in str(info.value)


def test_the_shape_keys_leave_older_cell_ids_alone() -> None:
    values = {"model": {"name": "gpt"}, "size": "tiny"}
    with_keys = {"model": {"name": "gpt", "m": None, "n": None, "k": None}, "size": "tiny"}
    assert config_digest(values) == config_digest(with_keys)
    assert config_digest(cell_config_from_dict(gemm_config(gemm={"m": 8}))) != config_digest(
        cell_config_from_dict(gemm_config())
    )


#: The experiment's M (N = K = 8192): 1 .. 8192, the powers of two.
EXPERIMENT_MS = [2**i for i in range(14)]
#: Its implementations: (precision, backend, mode, gemm.kernel).
AUTOTUNE = "max-autotune-no-cudagraphs"
IMPLEMENTATIONS = [
    ("bf16", "eager", None, None), ("bf16", "inductor", AUTOTUNE, None),
    ("fp8", "eager", None, None), ("fp8", "inductor", AUTOTUNE, None),
    ("fp8", "eager", None, "triton_base"), ("fp8", "eager", None, "triton_splitk"),
]  # fmt: skip


def test_the_fp8_gemm_experiment_expands(tmp_path: Path) -> None:
    shown = cli(tmp_path, "sweep", "+experiment=fp8_gemm", "--dry-run", f"hydra.sweep.dir={tmp_path / 'sw'}")
    assert shown.returncode == 0, shown.stderr
    # M = 1 .. 8192 (14 powers of two) x bf16, fp8 x eager, inductor, + fp8 triton_base and triton_splitk
    assert f"{14 * 6} cell(s)" in shown.stdout
    assert "max-autotune-no-cudagraphs" in shown.stdout and "tensorwise" in shown.stdout
    assert "triton_splitk" in shown.stdout and "triton_base" in shown.stdout
    assert not (tmp_path / "sw").exists()  # nothing written


def _planned(cells) -> Counter:
    return Counter(
        (c.config["gemm"]["m"], c.config["precision"]["name"], c.config["backend"]["name"],
         c.config["backend"]["mode"], c.config["gemm"]["kernel"])
        for c in cells
    )  # fmt: skip


def test_the_fp8_gemm_experiment_plans_the_triton_kernels_in_fp8_only(tmp_path: Path) -> None:
    """Issue 40 item 2: the post's Triton kernels at every M of the experiment, fp8 tensorwise through
    eager only (each cell passed the catalogue's check as a submitted grid does), never a bf16 or
    inductor cell with a kernel, which the catalogue refuses."""
    grid = expand(["+experiment=fp8_gemm", f"hydra.sweep.dir={tmp_path}"])
    assert _planned(grid.cells) == Counter((m, *i) for m in EXPERIMENT_MS for i in IMPLEMENTATIONS)
    assert (
        {c.config["gemm"]["n"] for c in grid.cells} == {c.config["gemm"]["k"] for c in grid.cells} == {8192}
    )
    assert {c.config["precision"]["recipe"] for c in grid.cells} == {"tensorwise"}
    # The same implementations as a product of axes would plan refused cells: the sweep is refused whole.
    with pytest.raises(GridError, match="gemm.kernel=triton_splitk runs fp8 GEMMs"):
        expand(["model=gemm", "precision.name=bf16,fp8", "gemm.kernel=triton_splitk", "device=cuda"])
    # One axis to restrict: the SplitK kernel against fp8 cuBLAS only.
    some = expand(["+experiment=fp8_gemm", "experiment.implementation=fp8_cublas,fp8_triton_splitk"])
    assert _planned(some.cells) == Counter((m, *i) for m in EXPERIMENT_MS for i in IMPLEMENTATIONS[2::3])


def test_the_fp8_gemm_experiment_keeps_the_ids_of_its_cublas_and_inductor_cells(tmp_path: Path) -> None:
    """The cells the experiment planned as a product of precision x backend before it had the Triton
    kernels keep their ids: a re-run of a sweep made then finds them finished."""
    ms = ",".join(map(str, EXPERIMENT_MS))
    shape = ["model=gemm", "size=small", f"gemm.m={ms}", "gemm.n=8192", "gemm.k=8192",
             "precision.name=bf16,fp8", "precision.recipe=tensorwise", "device=cuda"]  # fmt: skip
    product = [
        *expand([*shape, "backend=eager"]).cells,
        *expand([*shape, "backend=inductor", f"backend.mode={AUTOTUNE}"]).cells,
    ]
    grid = expand(["+experiment=fp8_gemm", f"hydra.sweep.dir={tmp_path}"])
    cublas_and_inductor = {c.cell_id for c in grid.cells if c.config["gemm"]["kernel"] is None}
    assert len(product) == 14 * 4 and {c.cell_id for c in product} == cublas_and_inductor


def test_the_fp8_gemm_experiment_plans_on_the_seminar_cluster_s_h100s(tmp_path: Path) -> None:
    """Issue 40 item 5: the experiment made for the H100 (fp8 needs compute capability 8.9+) is placed
    on grete's H100 partition, not refused for the profile's A100 default."""
    shown = cli(tmp_path, "sweep", "+experiment=fp8_gemm", "cluster=grete", "--dry-run",
                f"hydra.sweep.dir={tmp_path / 'sw'}")  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    rows = [line for line in shown.stdout.splitlines() if "| gemm " in line]
    assert len(rows) == 14 * 6 and all("grete-h100" in row and "gpu:H100:1" in row for row in rows)
