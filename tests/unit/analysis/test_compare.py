"""`compilebench compare SWEEP_A SWEEP_B` through the command line's main(), on sweeps written by the
workloads' own writer: cells matched by their axes, ratios with intervals, regressions and the exit
codes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from orchestrator.cli.main import main
from tests.helpers.analysis_sweeps import (
    H100,
    write_cell,
    write_manifest,
    write_paired_replicates,
    write_replicates,
)


def steps(median: float, seed: int, n: int = 40) -> list[float]:
    """Tight step times (1% spread) around `median`."""
    return list(np.random.default_rng(seed).lognormal(np.log(median), 0.01, n))


def write_sweep(root: Path, inductor_ms: float, eager_ms: float = 10.0, prefix: str = "", **run) -> Path:
    """An eager and an inductor cell of gpt tiny; cell ids with `prefix`, so that matching by id
    would find nothing between two sweeps of different prefixes."""
    write_cell(root, f"{prefix}e", "eager", step_ms=steps(eager_ms, 1), **run)
    write_cell(root, f"{prefix}i", "inductor", step_ms=steps(inductor_ms, 2), **run)
    write_manifest(root, [{"cell_id": f"{prefix}{c}"} for c in ("e", "i")])
    return root


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["compare", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


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


# Device time: a host change told from a code change (issue 39). The cell: gpt small inductor,
# paired, 3 runs on each of two H100 hosts; wall step 11.57 -> 8.41 ms, GPU time 5.588 -> 5.581 ms.
GPT_SMALL = dict(model="gpt", size="small", **H100)
#: Launches per step of the cells below (host_ms_per_step = launches * µs per launch / 1e3).
LAUNCHES = 800.0


def device_run(gpu_ms: float, us_per_launch: float | None, launches: float = LAUNCHES, **run) -> dict:
    """A run row's device columns: GPU time per step over 3 profiled windows 0.05% apart, launches per
    step and the host's time to issue a step at `us_per_launch`."""
    windows = [gpu_ms * (1 + d) for d in (-0.0005, 0.0, 0.0005)]
    host = {} if us_per_launch is None else {"launches_per_step": launches,
                                            "host_ms_per_step": launches * us_per_launch / 1e3}  # fmt: skip
    return {"gpu_ms_per_step": gpu_ms, "gpu_ms_windows": windows, **host, **run}


def write_device_cell(
    root: Path, step_ms: float, gpu_ms: float, us_per_launch: float | None, runs: int = 3, **run
) -> Path:
    """An inductor cell of gpt small on an H100 run `runs` times, its runs' steps and GPU times 0.3%
    apart, each run's row with `device_run`'s columns (and `run`)."""
    spread = (1.0, 1.003, 0.997)[:runs]
    write_replicates(
        root, "i", "inductor", [steps(step_ms * s, seed) for seed, s in enumerate(spread)],
        replicate_run=[device_run(gpu_ms * s, us_per_launch, **run) for s in spread], **GPT_SMALL,
    )  # fmt: skip
    write_manifest(root, [{"cell_id": "i"}])
    return root


def compared(capsys: pytest.CaptureFixture[str], a: Path, b: Path) -> tuple[int, dict, str]:
    """(exit code, the one compared cell's JSON record, the Markdown)."""
    code, out, _ = run(capsys, a, b, "--format", "json")
    (cell,) = json.loads(out)["cells"]
    markdown_code, markdown, _ = run(capsys, a, b)
    assert markdown_code == code
    return code, cell, markdown


def welch(top: list[float], bottom: list[float]) -> tuple[float, float]:
    """Welch's 95% interval of exp(mean log top - mean log bottom), by hand."""
    logs = [np.log(values) for values in (top, bottom)]
    vt, vb = (v.var(ddof=1) / len(v) for v in logs)
    df = (vt + vb) ** 2 / (vt**2 / (len(logs[0]) - 1) + vb**2 / (len(logs[1]) - 1))
    centre, half = logs[0].mean() - logs[1].mean(), float(stats.t.ppf(0.975, df)) * np.sqrt(vt + vb)
    return float(np.exp(centre - half)), float(np.exp(centre + half))


def test_a_faster_host_is_a_host_change_not_an_improvement(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's case: the step 27% faster on B, the GPU time the same to 0.13%, the host's µs per
    launch 10.5 -> 9.6: a host change, counted as neither improvement nor regression, both ways round."""
    a = write_device_cell(tmp_path / "a", 11.57, 5.588, 10.5)
    b = write_device_cell(tmp_path / "b", 8.41, 5.581, 9.6)
    code, cell, markdown = compared(capsys, a, b)
    assert code == 0 and (cell["step_verdict"], cell["verdict"]) == ("improvement", "host change")
    assert cell["gpu_verdict"] == "within threshold" and cell["gpu_interval"] == "across 3+3 runs"
    assert cell["gpu_ratio"] == pytest.approx(5.581 / 5.588)
    spread = [1.0, 1.003, 0.997]
    low, high = welch([5.581 * s for s in spread], [5.588 * s for s in spread])
    assert (cell["gpu_ratio_low"], cell["gpu_ratio_high"]) == (pytest.approx(low), pytest.approx(high))
    assert (cell["a_us_per_launch"], cell["b_us_per_launch"]) == (pytest.approx(10.5), pytest.approx(9.6))
    assert cell["a_launches_per_step"] == cell["b_launches_per_step"] == LAUNCHES
    assert "| host change: 10.5 → 9.6 µs/launch, GPU time 5.59 → 5.58 ms |" in markdown
    assert markdown.rstrip().endswith("1 cell(s) compared, 1 host change(s), 0 regression(s)")
    code, cell, markdown = compared(capsys, b, a)  # a slower host: no regression, exit 0
    assert code == 0 and (cell["step_verdict"], cell["verdict"]) == ("regression", "host change")
    assert "| host change: 9.6 → 10.5 µs/launch, GPU time 5.58 → 5.59 ms |" in markdown
    result = json.loads(run(capsys, b, a, "--format", "json")[1])
    assert (result["regressions"], result["host_changes"]) == (0, 1)


def test_a_paired_cell_is_read_on_its_own_side(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A paired cell's step and GPU time are its compiled side's (its own steps); its eager side's GPU
    time, here twice as long in B, is not what compare weighs: still a host change."""
    for root, compiled_ms, gpu_ms, us, eager_gpu_ms in (
        ("a", 11.57, 5.588, 10.5, 7.456),
        ("b", 8.41, 5.581, 9.6, 15.0),
    ):
        blocks = [
            [(steps(15.0, 10 * r + p, 5), steps(compiled_ms, 5 + 10 * r + p, 5)) for p in range(4)]
            for r in range(3)
        ]  # 3 runs of 4 pairs of 5-step blocks
        write_paired_replicates(
            tmp_path / root, "i", "inductor", blocks,
            replicate_run=[device_run(gpu_ms, us, eager_gpu_ms_per_step=eager_gpu_ms)] * 3, **GPT_SMALL,
        )  # fmt: skip
    code, cell, markdown = compared(capsys, tmp_path / "a", tmp_path / "b")
    assert (code, cell["verdict"], cell["gpu_interval"]) == (0, "host change", "across 3+3 runs")
    assert cell["gpu_ratio"] == pytest.approx(5.581 / 5.588)
    # The per-backend speedups carry the device-time speedup of each sweep: its eager side's GPU time
    # over its compiled side's.
    (speedups,) = json.loads(run(capsys, tmp_path / "a", tmp_path / "b", "--format", "json")[1])["speedups"]
    assert speedups["a_geomean_device_speedup"] == pytest.approx(7.456 / 5.588)
    assert speedups["b_geomean_device_speedup"] == pytest.approx(15.0 / 5.581)
    assert f"| {7.456 / 5.588:.3f}x → {15.0 / 5.581:.3f}x |" in markdown


def test_less_gpu_time_is_an_improvement_whatever_the_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A code change: the GPU time 5.6 -> 4.0 ms (beyond the threshold) on a host that also got faster:
    the device time decides, an improvement."""
    a = write_device_cell(tmp_path / "a", 8.0, 5.6, 10.5)
    b = write_device_cell(tmp_path / "b", 6.0, 4.0, 9.6)
    code, cell, markdown = compared(capsys, a, b)
    assert code == 0 and (cell["verdict"], cell["gpu_verdict"]) == ("improvement", "improvement")
    assert cell["gpu_ratio_high"] < 0.95
    assert "| improvement: 10.5 → 9.6 µs/launch, GPU time 5.60 → 4.00 ms |" in markdown
    assert markdown.rstrip().endswith("1 cell(s) compared, 0 regression(s)")


def test_more_gpu_time_under_a_faster_host_is_a_regression(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A GPU-bound cell whose GPU time grew 5.6 -> 6.5 ms while B's host is faster (10.5 -> 9.0 µs per
    launch): the step regressed, the GPU's work with it: a regression, exit 1."""
    a = write_device_cell(tmp_path / "a", 6.0, 5.6, 10.5)
    b = write_device_cell(tmp_path / "b", 6.9, 6.5, 9.0)
    code, cell, markdown = compared(capsys, a, b)
    assert code == 1 and (cell["verdict"], cell["gpu_verdict"]) == ("regression", "regression")
    assert "| regression: 10.5 → 9.0 µs/launch, GPU time 5.60 → 6.50 ms |" in markdown
    assert markdown.rstrip().endswith("1 regression(s): gpt small · inductor 1.150x")


def test_fewer_launches_are_a_code_change(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same GPU time, the step faster, the µs per launch lower, but 800 -> 100 launches per step
    (CUDA graphs): the code changed, not the host: an improvement."""
    a = write_device_cell(tmp_path / "a", 11.57, 5.588, 10.5)
    b = write_device_cell(tmp_path / "b", 8.41, 5.581, 9.6, launches=100.0)
    code, cell, _ = compared(capsys, a, b)
    assert (code, cell["verdict"], cell["gpu_verdict"]) == (0, "improvement", "within threshold")
    assert cell["b_launches_per_step"] == 100.0


def test_one_run_a_side_has_an_interval_over_its_windows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One run on each side: the GPU time's interval is Welch's over the two runs' profiled windows,
    `within one process`. The rule is equivalence within the threshold, not an interval that holds 1:
    this one lies below 1 (-0.13%, the windows 0.05% apart) and is a host change. With three runs in
    B, B's windows of all three runs count, still within one process."""
    a = write_device_cell(tmp_path / "a", 11.57, 5.588, 10.5, runs=1)
    b = write_device_cell(tmp_path / "b", 8.41, 5.581, 9.6, runs=1)
    code, cell, markdown = compared(capsys, a, b)
    assert cell["gpu_interval"] == cell["interval"] == "within one process"
    low, high = welch(device_run(5.581, None)["gpu_ms_windows"], device_run(5.588, None)["gpu_ms_windows"])
    assert (cell["gpu_ratio_low"], cell["gpu_ratio_high"]) == (pytest.approx(low), pytest.approx(high))
    assert cell["gpu_ratio_high"] < 1 and (code, cell["verdict"]) == (0, "host change")
    assert "| within one process | host change: 10.5 → 9.6 µs/launch" in markdown
    b = write_device_cell(tmp_path / "b3", 8.41, 5.581, 9.6)
    code, cell, _ = compared(capsys, a, b)
    windows = [device_run(5.581 * s, None)["gpu_ms_windows"] for s in (1.0, 1.003, 0.997)]
    low, high = welch(sum(windows, []), device_run(5.588, None)["gpu_ms_windows"])
    assert (cell["gpu_ratio_low"], cell["gpu_ratio_high"]) == (pytest.approx(low), pytest.approx(high))
    assert (cell["gpu_interval"], code, cell["verdict"]) == ("within one process", 0, "host change")


def test_before_launches_were_counted_the_host_op_us_speaks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An upgraded older sweep: GPU time per step, no launches, host_op_us 10.5 -> 9.6: a host change
    in µs/op."""
    a = write_device_cell(tmp_path / "a", 11.57, 5.588, None, host_op_us=10.5)
    b = write_device_cell(tmp_path / "b", 8.41, 5.581, None, host_op_us=9.6)
    code, cell, markdown = compared(capsys, a, b)
    assert (code, cell["verdict"], cell["a_us_per_launch"]) == (0, "host change", None)
    assert "| host change: 10.5 → 9.6 µs/op, GPU time 5.59 → 5.58 ms |" in markdown


def test_cells_without_device_time_keep_the_step_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A CPU sweep: no GPU columns, the step decides and says so. Beside a cell with device time, a cell
    without it on one side reads `no device time`, and its moved step keeps its verdict."""
    a, b = write_sweep(tmp_path / "a", 8.0), write_sweep(tmp_path / "b", 6.0)
    markdown = run(capsys, a, b)[1]
    assert "GPU" not in markdown.split("\n\n")[1] and "| improvement: no device time |" in markdown
    assert "No device time in these cells" in markdown
    a = write_device_cell(tmp_path / "ga", 8.0, 5.6, 10.5)
    b = write_device_cell(tmp_path / "gb", 6.0, 5.6, 9.6)
    write_cell(a, "c", "inductor", step_ms=steps(8.0, 5), **{**GPT_SMALL, "seed": 1})
    write_cell(b, "c", "inductor", step_ms=steps(6.0, 5), **{**GPT_SMALL, "seed": 1}, gpu_ms_per_step=5.6)
    code, out, _ = run(capsys, a, b, "--format", "json")
    cells = {cell["a_cell_id"]: cell for cell in json.loads(out)["cells"]}
    assert code == 0 and cells["i"]["verdict"] == "host change"
    assert (cells["c"]["verdict"], cells["c"]["verdict_note"], cells["c"]["gpu_ratio"]) == (
        "improvement", "no device time", None,
    )  # fmt: skip
    (row,) = [line for line in run(capsys, a, b)[1].splitlines() if line.startswith("| gpt small seed 1 ")]
    assert [part.strip() for part in row.split("|")][-4:-1] == [
        "no device time",
        "",
        "improvement: no device time",
    ]
