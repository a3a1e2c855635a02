"""Layer cells (`gemm.layer`) in `compilebench analyze`: their table beside the GEMM table (never in it),
the post's layer claims judged (`--reference fp8_triton`), and sweeps written before layer cells."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from analysis.report import analyze
from analysis.studies.gemm.claims import NOT_MEASURED, NOT_REPRODUCED, REPRODUCED, load_claims
from analysis.studies.gemm.layer import LAYER_CLAIMS, LAYER_TABLE, NOT_JUDGED, NOTHING_TO_JUDGE
from tests.helpers.analysis_sweeps import PEAK_GBPS, PEAK_TFLOPS, write_gemm_cell
from workloads.contract.schema import LAYER_FIELDS
from workloads.gemm.layer import layer_columns, layer_shapes

LAYER = "llama3_70b_attention"
#: Made-up windows of two layer cells at M = 16: cuBLAS launched fast enough to keep its gaps short,
#: the Triton layer with a long launch per kernel (the post's case).
CUBLAS = {"layer_launched_us": 80.0, "layer_graph_us": 62.0, "layer_launched_idle_share": 0.25,
          "layer_graph_idle_share": 0.03, "layer_launched_gap_us": 7.0, "layer_graph_gap_us": 0.6,
          "layer_launched_matmul_us": 60.0, "layer_graph_matmul_us": 60.0, "layer_launched_kernels": 4.0,
          "layer_graph_kernels": 4.0, "layer_launched_launch_us": 31.0, "layer_graph_launch_us": 4.0,
          "layer_graph_speedup": 80.0 / 62.0, "layer_windows": 20}  # fmt: skip
TRITON = {**CUBLAS, "layer_launched_us": 700.0, "layer_graph_us": 70.0, "layer_launched_idle_share": 0.9,
          "layer_launched_gap_us": 210.0, "layer_graph_gap_us": 8.0, "layer_graph_speedup": 10.0}  # fmt: skip


def layer_row(**run: object) -> dict:
    """What a layer cell's row holds beside a GEMM cell's: its layer, no single N and K, the sums of its
    GEMMs' bytes and floors (workloads/gemm/layer.py at an H100's peaks)."""
    sums = layer_columns([shape for _, shape in layer_shapes(LAYER, 16)], PEAK_TFLOPS["fp8"], PEAK_GBPS)
    del sums["flops_per_step"]
    return {"gemm_layer": LAYER, "gemm_n": None, "gemm_k": None, "compile_mode": None, **sums, **run}


def write_layer_sweep(root: Path) -> Path:
    """One fp8 cuBLAS GEMM at M = 16 and the layer at M = 16 with cuBLAS and with the SplitK kernel."""
    write_gemm_cell(root, "fp8-16", "eager", "fp8", 16, [25.8, 25.9, 26.0], recipe="tensorwise")
    for cell_id, backend, layer, us in (("layer-cublas", "eager", CUBLAS, 61.0),
                                        ("layer-tk", "triton_splitk", TRITON, 68.0)):  # fmt: skip
        write_gemm_cell(root, cell_id, backend, "fp8", 16, [us - 0.1, us, us + 0.1], recipe="tensorwise",
                        **layer_row(**layer))  # fmt: skip
    return root


def test_layer_cells_have_their_own_table_and_stay_out_of_the_gemm_table(tmp_path: Path) -> None:
    loaded = analyze(write_layer_sweep(tmp_path), warn=None)
    assert list(loaded.gemm["cell_id"]) == ["fp8-16"]
    table = next(t for t in loaded.tables if t.name == LAYER_TABLE)
    rows = table.text.set_index("implementation")
    assert list(rows.index) == ["fp8 tensorwise cuBLAS", "fp8 tensorwise triton_splitk"]
    cublas, splitk = rows.loc["fp8 tensorwise cuBLAS"], rows.loc["fp8 tensorwise triton_splitk"]
    assert (cublas["launched µs"], cublas["graph µs"], cublas["graph speedup"]) == ("80.00", "62.00", "1.29x")
    assert (splitk["idle launched"], splitk["gap launched µs"], splitk["gap graph µs"]) == (
        "90%",
        "210.0",
        "8.00",
    )
    assert cublas["replayed µs [95%]"].startswith("61.00 [") and cublas["M"] == "16"
    # The post's numbers come from the reference file, not from the code.
    for _, claim in load_claims(layer=True).iterrows():
        assert f"{claim['claim']}: " in table.note


def test_the_post_s_layer_claims_judged(tmp_path: Path) -> None:
    """The Triton layer's 210 µs gaps reach the post's 165 µs and its 10x the post's 6.4x; 90% idle
    falls short of 92%; the smallest graph gap, cuBLAS's 0.6 µs, is within 6.65 µs; the matmul time
    is shown, not judged (the post does not name its layer's GEMMs)."""
    loaded = analyze(write_layer_sweep(tmp_path), "fp8_triton", warn=None)
    claims = next(t for t in loaded.tables if t.name == LAYER_CLAIMS).data
    verdicts = dict(zip(claims["kind"], claims["verdict"]))
    assert verdicts == {
        "layer_launched_gap_us": REPRODUCED,
        "layer_launched_matmul_us": NOT_JUDGED,
        "layer_launched_idle_share": NOT_REPRODUCED,
        "layer_graph_gap_us": REPRODUCED,
        "layer_graph_speedup": REPRODUCED,
    }
    reasons = dict(zip(claims["kind"], claims["reason"]))
    assert reasons["layer_launched_idle_share"] == (
        "largest: 90% (fp8 tensorwise triton_splitk, M = 16); at least 92% not reached"
    )
    assert "smallest: 0.6 µs (fp8 tensorwise cuBLAS, M = 16)" in reasons["layer_graph_gap_us"]
    # The GEMM claims table judges one GEMM's claims only.
    gemm_claims = next(t for t in loaded.tables if t.name == "fp8_triton_claims").data
    assert not gemm_claims["kind"].str.startswith("layer_").any()


def test_a_sweep_without_layer_cells(tmp_path: Path) -> None:
    """A sweep of GEMMs written before layers (no gemm_layer, no layer_* columns) analyses as before:
    its GEMM table, no layer table, and the layer claims say there is nothing to judge."""
    cell = write_gemm_cell(tmp_path, "fp8-16", "eager", "fp8", 16, [25.8, 25.9, 26.0], recipe="tensorwise")
    old = pq.read_table(cell / "run.parquet")
    pq.write_table(
        old.drop_columns(["gemm_layer", *(field.name for field in LAYER_FIELDS)]), cell / "run.parquet"
    )
    loaded = analyze(tmp_path, "fp8_triton", warn=None)
    assert list(loaded.gemm["cell_id"]) == ["fp8-16"] and loaded.gemm_layers.empty
    assert LAYER_TABLE not in [t.name for t in loaded.tables]
    claims = next(t for t in loaded.tables if t.name == LAYER_CLAIMS)
    assert claims.data.empty and claims.note == NOTHING_TO_JUDGE


def test_a_failed_layer_cell_measured_nothing(tmp_path: Path) -> None:
    write_gemm_cell(tmp_path, "layer", "eager", "fp8", 16, [], recipe="tensorwise", status="failed",
                    **layer_row())  # fmt: skip
    loaded = analyze(tmp_path, "fp8_triton", warn=None)
    assert list(next(t for t in loaded.tables if t.name == LAYER_TABLE).text["launched µs"]) == [""]
    claims = next(t for t in loaded.tables if t.name == LAYER_CLAIMS).data
    assert set(claims["verdict"]) == {NOT_MEASURED}
