"""`compilebench compare SWEEP_A SWEEP_B` through the command line's main(), on sweeps written by the
workloads' own writer: cells matched by their axes, ratios with intervals, regressions and the exit
codes (a host change told from a code change: test_compare_hosts.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from tests.helpers.analysis_sweeps import (
    H100,
    write_cell,
    write_manifest,
    write_replicates,
)
from tests.helpers.compare_sweeps import run, steps, write_sweep


def test_identical_sweeps_have_no_regression(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_sweep(tmp_path / "a", 8.0)
    shutil.copytree(a, tmp_path / "b")
    code, out, _ = run(capsys, a, tmp_path / "b")
    assert code == 0
    assert out.count("| within threshold |") == 2 and "2 cell(s) compared, 0 regression(s)" in out
    assert "1.000x [" in out


def test_b_ten_percent_slower_is_a_regression_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = write_sweep(tmp_path / "a", 8.0)
    b = write_sweep(tmp_path / "b", 8.8, prefix="new-", **H100)  # another GPU: hardware is not matched
    code, out, _ = run(capsys, a, b, "--format", "json")
    assert code == 1
    result = json.loads(out)
    cells = {cell["backend"]: cell for cell in result["cells"]}
    inductor = cells["inductor"]
    assert (inductor["a_cell_id"], inductor["b_cell_id"], inductor["verdict"]) == ("i", "new-i", "regression")
    assert inductor["step_ratio"] == pytest.approx(1.1, rel=0.01)
    assert 1.05 < inductor["step_ratio_low"] < 1.1 < inductor["step_ratio_high"] < 1.15
    assert inductor["throughput_ratio"] == pytest.approx(1 / 1.1, rel=0.01)
    assert inductor["throughput_ratio_low"] < 1 / 1.1 < inductor["throughput_ratio_high"] < 1 / 1.05
    assert cells["eager"]["verdict"] == "within threshold" and result["regressions"] == 1
    assert inductor["b_gpu_name"] == H100["gpu_name"] and inductor["a_gpu_name"] is None
    code, out, _ = run(capsys, a, b)  # the table names the cell
    assert code == 1 and out.rstrip().endswith("1 regression(s): gpt tiny · inductor 1.100x")
    assert "| gpt tiny · inductor" in out and "| NVIDIA H100 80GB HBM3 |" in out


def test_three_percent_slower_is_within_the_default_threshold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = write_sweep(tmp_path / "a", 8.0), write_sweep(tmp_path / "b", 8.24)
    code, out, _ = run(capsys, a, b, "--format", "json")
    inductor = next(cell for cell in json.loads(out)["cells"] if cell["backend"] == "inductor")
    assert code == 0 and inductor["verdict"] == "within threshold"
    assert 1.0 < inductor["step_ratio_low"] and inductor["step_ratio_high"] < 1.05  # slower, by less than 5%
    assert inductor["interval"] == "within one process"  # one run each: run-to-run spread unseen
    assert run(capsys, a, b, "--threshold", "0.01")[0] == 1  # beyond 1%: a regression


def test_cells_with_runs_in_both_sweeps_have_welch_intervals_over_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three runs in A, four in B, their medians 2% apart from run to run: the step ratio's interval is
    Welch's over the runs' median steps on the log scale (Welch-Satterthwaite df); the table says
    `across 3+4 runs`."""
    a_runs, b_runs = (10.0, 10.2, 9.9), (10.5, 10.9, 10.6, 10.8)
    for root, runs in ((tmp_path / "a", a_runs), (tmp_path / "b", b_runs)):
        write_replicates(root, "e", "eager", [steps(m, seed) for seed, m in enumerate(runs)])
        write_manifest(root, [{"cell_id": "e"}])
    code, out, _ = run(capsys, tmp_path / "a", tmp_path / "b", "--format", "json")
    cell = json.loads(out)["cells"][0]
    medians = [
        np.log([np.median(steps(m, seed)) for seed, m in enumerate(runs)]) for runs in (a_runs, b_runs)
    ]
    va, vb = (m.var(ddof=1) / len(m) for m in medians)
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 3)
    centre, half = medians[1].mean() - medians[0].mean(), float(stats.t.ppf(0.975, df)) * np.sqrt(va + vb)
    assert cell["step_ratio_low"] == pytest.approx(np.exp(centre - half), rel=1e-3)
    assert cell["step_ratio_high"] == pytest.approx(np.exp(centre + half), rel=1e-3)
    assert cell["interval"] == "across 3+4 runs" and cell["verdict"] == "undecided"
    assert "| across 3+4 runs |" in run(capsys, tmp_path / "a", tmp_path / "b")[1]


def test_cells_only_in_one_sweep_are_listed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_sweep(tmp_path / "a", 8.0)
    write_cell(a, "seed1", "aot_eager", step_ms=steps(9.0, 3), seed=1)
    b = write_sweep(tmp_path / "b", 8.0)
    write_cell(b, "bf", "inductor", step_ms=steps(9.0, 4), precision="fp32")
    write_cell(b, "fails", "aot_eager", status="failed", error="boom", seed=1)  # in both, not completed in B
    code, out, _ = run(capsys, a, b)
    assert code == 0
    assert "Only in A" not in out  # A's seed-1 cell is in B, failed there
    assert (
        "Not compared (not completed in both):\n"
        "- gpt tiny bf16 seed 1 · aot_eager (A seed1 completed, B fails failed)" in out
    )
    assert f"Only in B ({b}):\n- gpt tiny fp32 seed 1337 · inductor (bf, completed)" in out
    result = json.loads(run(capsys, a, b, "--format", "json")[1])
    assert [cell["cell_id"] for cell in result["only_in_b"]] == ["bf"] and result["only_in_a"] == []


def test_the_speedups_of_two_runs_of_a_model_zoo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A suite run twice: per compiled backend, the geometric mean of the models' speedups in each,
    and the model whose speedup moved most."""
    for sweep, x_ms, y_ms in (("a", 5.0, 10.0), ("b", 8.0, 5.0)):  # x: 2x then 1.25x; y: 1x then 2x
        for arch, inductor_ms in (("x", x_ms), ("y", y_ms)):
            write_cell(tmp_path / sweep, f"{arch}e", "eager", step_ms=steps(10.0, 1), model="timm", arch=arch)
            write_cell(
                tmp_path / sweep,
                f"{arch}i",
                "inductor",
                step_ms=steps(inductor_ms, 2),
                model="timm",
                arch=arch,
            )
    code, out, _ = run(capsys, tmp_path / "a", tmp_path / "b", "--format", "json")
    (row,) = json.loads(out)["speedups"]  # eager, its own baseline, has no row
    assert (row["backend"], row["cells"]) == ("inductor", 2)
    assert row["a_geomean_speedup"] == pytest.approx(2**0.5, rel=0.01)
    assert row["b_geomean_speedup"] == pytest.approx(2.5**0.5, rel=0.01)
    assert row["geomean_ratio"] == pytest.approx(1.25**0.5, rel=0.01)
    assert row["most_changed_a"] == pytest.approx(1.0, rel=0.01)
    assert row["most_changed_b"] == pytest.approx(2.0, rel=0.01)
    assert row["most_changed"].startswith("y")
    out = run(capsys, tmp_path / "a", tmp_path / "b")[1]
    assert "| y tiny · inductor: 1.00x → 2.00x |" in out  # the medians of lognormal steps: 1.413x, 1.580x


def test_bad_input_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_sweep(tmp_path / "a", 8.0)
    (tmp_path / "empty").mkdir()
    code, out, err = run(capsys, a, tmp_path / "empty")
    assert (code, out) == (
        2,
        "",
    ) and err == f"error: not a sweep directory (no manifest.parquet, no cells/): {tmp_path / 'empty'}\n"
    other = tmp_path / "other"
    write_cell(other, "r", "eager", step_ms=steps(20.0, 5), model="resnet")
    code, out, err = run(capsys, a, other)
    assert code == 2 and out == "" and err.splitlines()[-1].startswith("error: no cell of")
    assert len([line for line in err.splitlines() if line.startswith("error:")]) == 1
