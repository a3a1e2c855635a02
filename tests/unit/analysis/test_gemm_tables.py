"""GEMM cells in `compilebench analyze`: the GEMM table against hand computation, the figure and the
report, and sweeps without GEMM cells left as they were. The FP8 GEMM post's claims judged
(`--reference fp8_triton`): tests/unit/analysis/test_fp8_triton_claims.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from analysis.report import analyze
from analysis.studies.gemm.claims import NOT_MEASURED, NOTHING_TO_JUDGE
from orchestrator.cli.main import main
from tests.helpers.analysis_sweeps import PEAK_GBPS, write_cell, write_gemm_cell, write_seminar_sweep

#: µs per GEMM at N = K = 8192 as one H100 measured them (../shared/reference): bf16 cuBLAS, fp8
#: cuBLAS, fp8 compiled; each cell's replays are the value ± 0.1, so its median is the value.
MEASURED = {1: (47.1, 25.6, 32.4), 16: (48.0, 25.9, 26.7), 64: (49.0, 27.0, 32.7), 256: (55.2, 30.9, 42.0)}
COMPILED = "fp8 tensorwise inductor (max-autotune-no-cudagraphs)"
#: The board's power while each cell replayed its GEMMs: its J per GEMM is this times its time.
WATTS = 500.0


def write_gemm_sweep(root: Path, measured: dict = MEASURED) -> Path:
    for m, (bf16, fp8, compiled) in measured.items():
        for cell_id, backend, precision, us, extra in (
            (f"bf16-{m}", "eager", "bf16", bf16, {}),
            (f"fp8-{m}", "eager", "fp8", fp8, {"recipe": "tensorwise"}),
            (f"fp8c-{m}", "inductor", "fp8", compiled, {"recipe": "tensorwise", "gemm_autotune_us": 20.0}),
        ):
            energy = {"joules_per_step": WATTS * us * 1e-6, "avg_power_w": WATTS}
            write_gemm_cell(root, cell_id, backend, precision, m, [us - 0.1, us, us + 0.1], **extra, **energy)
    return root


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["analyze", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_gemm_table_against_hand_computation(tmp_path: Path) -> None:
    write_gemm_sweep(tmp_path, {16: MEASURED[16]})
    result = analyze(tmp_path, warn=None)
    rows = result.gemm.set_index("implementation")
    assert list(rows.index) == ["bf16 cuBLAS", "fp8 tensorwise cuBLAS", COMPILED]
    compiled = rows.loc[COMPILED]
    nbytes = 8192 * 8192 + 16 * 8192 + 2 * 16 * 8192  # fp8 inputs, bf16 output
    assert compiled["us"] == pytest.approx(26.7)
    assert (
        compiled["us_low"] <= 26.7 <= compiled["us_high"] and compiled["us_high"] - compiled["us_low"] < 0.25
    )
    assert compiled["tflops"] == pytest.approx(2 * 16 * 8192 * 8192 / 26.7e6)
    assert compiled["gbps"] == pytest.approx(nbytes / 26.7e3)
    floor = nbytes / (PEAK_GBPS * 1e3)
    assert compiled["gemm_floor_us"] == pytest.approx(floor)
    assert compiled["floor_share"] == pytest.approx(floor / 26.7)
    assert compiled["gemm_bound"] == "memory" and compiled["gemm_kernel"] == "triton_tem_fused_0"
    assert compiled["autotune_ratio"] == pytest.approx(26.7 / 20.0)
    assert compiled["vs_bf16_cublas"] == pytest.approx(48.0 / 26.7)
    assert compiled["vs_fp8_cublas"] == pytest.approx(25.9 / 26.7)
    assert compiled["vs_fp8_cublas_low"] < 25.9 / 26.7 < compiled["vs_fp8_cublas_high"]
    assert rows.loc["fp8 tensorwise cuBLAS", "vs_bf16_cublas"] == pytest.approx(48.0 / 25.9)
    assert rows.loc["bf16 cuBLAS", "vs_bf16_cublas"] == 1.0
    text = next(t for t in result.tables if t.name == "gemm").text.set_index("implementation")
    assert text.loc[COMPILED, "µs [95%]"].startswith("26.70 [")
    assert text.loc[COMPILED, "measured / autotune"] == "1.33x"
    # one run: J per GEMM without an interval (it needs two runs), in mJ
    assert compiled["joules_per_step"] == pytest.approx(WATTS * 26.7e-6)
    assert text.loc[COMPILED, "mJ per GEMM"] == "13.35" and text.loc[COMPILED, "W"] == "500.0"
    # GEMM cells time one GEMM, not a training step: no training table names them.
    assert [t.name for t in result.tables] == ["gemm"]


def test_an_fp8_cell_is_compared_with_cublas_of_its_own_recipe(tmp_path: Path) -> None:
    write_gemm_sweep(tmp_path, {16: MEASURED[16]})
    write_gemm_cell(tmp_path, "fp8r-16", "eager", "fp8", 16, [29.9, 30.0, 30.1], recipe="rowwise")
    write_gemm_cell(tmp_path, "fp8rc-16", "inductor", "fp8", 16, [26.9, 27.0, 27.1], recipe="rowwise")
    rows = analyze(tmp_path, warn=None).gemm.set_index("cell_id")
    assert rows.loc["fp8rc-16", "vs_fp8_cublas"] == pytest.approx(30.0 / 27.0)  # rowwise cuBLAS
    assert rows.loc["fp8c-16", "vs_fp8_cublas"] == pytest.approx(25.9 / 26.7)  # tensorwise cuBLAS
    assert rows.loc["fp8rc-16", "vs_bf16_cublas"] == pytest.approx(48.0 / 27.0)


def test_gemm_cells_stay_out_of_the_training_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_gemm_sweep(tmp_path, {1: MEASURED[1]})
    write_cell(tmp_path, "gpt-eager", "eager", step_ms=[10.0, 10.0, 10.0])
    write_cell(tmp_path, "gpt-inductor", "inductor", step_ms=[8.0, 8.0, 8.0])
    code, out, _ = run(capsys, str(tmp_path), "--no-plots", "--full")
    cells = out.split("### Cells by status")[0]
    assert code == 0 and "gpt-inductor" in cells and "fp8c-1" not in cells and "bf16-1" not in cells
    assert "### GEMMs: µs per GEMM against the roofline" in out
    code, out, _ = run(capsys, str(tmp_path), "--format", "csv")
    assert "gpt-inductor" in out and "fp8c-1" not in out


def test_figure_and_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_gemm_sweep(tmp_path)
    code, out, _ = run(capsys, str(tmp_path), "--reference", "fp8_triton")
    assert code == 0 and NOT_MEASURED in out  # no SplitK cell: its claims are not judged on another kernel
    png = tmp_path / "report" / "plots" / "gemm.png"
    assert png.stat().st_size > 0 and (tmp_path / "report" / "plots" / "gemm.svg").stat().st_size > 0
    page = (tmp_path / "report" / "index.md").read_text()
    assert "](plots/gemm.png)" in page and "### The FP8 GEMM post's claims against our GEMMs" in page
    assert (tmp_path / "report" / "tables" / "gemm.csv").is_file()


def test_sweep_without_gemm_cells(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_seminar_sweep(tmp_path)
    code, out, _ = run(capsys, str(tmp_path))
    assert code == 0 and "GEMM" not in out and len(re.findall(r"^### ", out, flags=re.M)) == 7
    assert not (tmp_path / "report" / "plots" / "gemm.png").exists()
    code, out, _ = run(capsys, str(tmp_path), "--reference", "fp8_triton", "--no-plots")
    assert code == 0 and f"### The FP8 GEMM post's claims against our GEMMs\n\n{NOTHING_TO_JUDGE}" in out
    assert "published" not in out  # the seminar's values only with --reference seminar


def test_unknown_reference_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["analyze", str(tmp_path), "--reference", "nope"])
    assert exit_.value.code == 2 and "invalid choice: 'nope'" in capsys.readouterr().err


def test_failed_and_result_less_gemm_cells(tmp_path: Path) -> None:
    write_gemm_cell(tmp_path, "bf16-1", "eager", "bf16", 1, [47.0, 47.1, 47.2])
    write_gemm_cell(tmp_path, "fp8c-1", "inductor", "fp8", 1, [], recipe="rowwise", status="failed")
    pending = tmp_path / "cells" / "pending"
    pending.mkdir()
    (pending / "config.yaml").write_text("model: {name: gemm}\nsize: x\n")
    table = next(t for t in analyze(tmp_path, "fp8_triton", warn=None).tables if t.name == "gemm")
    shown = dict(zip(table.text["cell"], table.text["µs [95%]"]))
    assert (
        shown["fp8c-1"] == "failed"
        and shown["pending"] == "no_result"
        and shown["bf16-1"].startswith("47.10")
    )
