"""Device time per side (analysis/cells/device_time.py) and its texts (analysis/cells/device_texts.py),
on synthetic sweeps written through the workloads' own writer: the cudagraphs case (compiled side
GPU-bound, eager side launch-bound: the wall speedup is the host's), the mobilenetv3 case (the kernels
gain 1.38x and the launcher eats it: what would close the gap), unpaired cells, CPU and distributed
cells (no device time, said plainly), an old sweep lifted from its busy share, and the model that
predicts a side's step on another host."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.cells.device_texts import GAP, HOST_MARK
from analysis.cells.device_time import LAUNCH_BOUND, predicted_step_ms
from analysis.cells.metrics import cell_metrics
from analysis.reading.collect import load_sweep
from analysis.rendering.text import fmt_speedup
from analysis.statistics.intervals import RunLogs, welch_interval
from analysis.studies.sweep.table import compact_table, summary_table
from tests.helpers.analysis_sweeps import (
    H100,
    metrics_of,
    write_cell,
    write_paired_replicates,
    write_ranks_cell,
)


def t_95(df: int) -> float:
    """Student's t 97.5% quantile for 2 degrees of freedom, closed form (not the code under test's)."""
    assert df == 2
    p = 0.975
    return (2 * p - 1) / math.sqrt(2 * p * (1 - p))


def geometric_mean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


#: The cudagraphs cell of issue 39, gpt small bf16, as three runs: per run (compiled GPU ms, eager GPU
#: ms, eager block ms, compiled block ms, eager host ms per step).
CUDAGRAPHS_RUNS = [
    (7.40, 7.50, 15.6, 7.97, 15.2),
    (7.42, 7.49, 15.9, 7.95, 15.5),
    (7.41, 7.52, 15.3, 7.96, 14.9),
]
EAGER_LAUNCHES, GRAPH_LAUNCHES = 2000.0, 3.0


def write_cudagraphs(sweep: Path) -> None:
    blocks = [[([eager, eager, eager], [compiled, compiled, compiled])] * 4 for _, _, eager, compiled, _ in
              CUDAGRAPHS_RUNS]  # fmt: skip
    runs = [
        dict(gpu_ms_per_step=own, eager_gpu_ms_per_step=eager, launches_per_step=GRAPH_LAUNCHES,
             eager_launches_per_step=EAGER_LAUNCHES, host_ms_per_step=0.05, eager_host_ms_per_step=host,
             kernels_per_step=900.0, eager_kernels_per_step=EAGER_LAUNCHES)
        for own, eager, _, _, host in CUDAGRAPHS_RUNS
    ]  # fmt: skip
    write_paired_replicates(sweep, "g", "cudagraphs", blocks, replicate_run=runs, **H100)


def test_a_cudagraphs_cell_whose_eager_side_is_launch_bound_is_host_dependent(tmp_path: Path) -> None:
    write_cudagraphs(tmp_path)
    cell = metrics_of(tmp_path)["g"]
    own, eager = [r[0] for r in CUDAGRAPHS_RUNS], [r[1] for r in CUDAGRAPHS_RUNS]
    assert cell["gpu_ms"] == pytest.approx(geometric_mean(own))
    assert cell["eager_gpu_ms"] == pytest.approx(geometric_mean(eager))
    assert cell["eager_step_ms"] == pytest.approx(geometric_mean([r[2] for r in CUDAGRAPHS_RUNS]))
    assert cell["launches_per_step"] == GRAPH_LAUNCHES and cell["eager_launches_per_step"] == EAGER_LAUNCHES
    assert cell["eager_kernels_per_step"] == EAGER_LAUNCHES and cell["kernels_per_step"] == 900.0
    us = sorted(r[4] * 1e3 / EAGER_LAUNCHES for r in CUDAGRAPHS_RUNS)[1]  # the median of the runs' µs
    assert cell["eager_host_us_per_launch"] == pytest.approx(us)
    # The device-time speedup: the runs' ratios, geometric mean, t interval over the 3 runs.
    logs = np.log(np.array(eager) / np.array(own))
    half = t_95(2) * logs.std(ddof=1) / math.sqrt(3)
    assert cell["device_speedup"] == pytest.approx(math.exp(logs.mean()))
    assert (cell["device_speedup_low"], cell["device_speedup_high"]) == pytest.approx(
        (math.exp(logs.mean() - half), math.exp(logs.mean() + half))
    )
    assert cell["device_interval"] == "across 3 runs"
    # Compiled: GPU 7.41 of a 7.96 ms step (idle 7%); eager: 7.5 of 15.6 (idle 52%).
    assert not cell["launch_bound"] and cell["eager_launch_bound"] and cell["host_dependent"]
    assert cell["speedup"] > 1.9 and cell["device_speedup"] < 1.02

    metrics = cell_metrics(load_sweep(tmp_path, warn=None))
    full = summary_table(metrics).text.iloc[0]
    # The GPU-bound compiled side's µs per launch is an upper bound (its host may wait for the queue).
    assert full["µs/launch"] == f"≤{cell['host_us_per_launch']:.1f} (eager {us:.1f})"
    host = full["host"]
    assert host == (
        f"{fmt_speedup(cell['speedup'])} on this host at {us:.1f} µs/launch; "
        f"{fmt_speedup(cell['device_speedup'])} on the GPU alone"
    )
    compact = compact_table(metrics)
    row = compact.text.iloc[0]
    assert row["speedup [95% CI]"].endswith(HOST_MARK) and row["GPU alone"] == fmt_speedup(
        cell["device_speedup"]
    )
    assert row["why"] == f"eager launch-bound, {us:.1f} µs/launch"
    assert f"{HOST_MARK}: host-dependent" in compact.note and "GPU alone: eager GPU time" in compact.note


#: mobilenetv3_large_100 bf16 batch 128 (issue 39): GPU ms per step of each side, the measured blocks,
#: the compiled side's launches and host ms per step, each side's three profiled windows.
MOBILENET = dict(gpu=12.81, eager_gpu=17.66, eager_ms=18.0, compiled_ms=18.4, launches=1200.0, host_ms=18.0)


def write_mobilenet(sweep: Path, backend: str = "inductor") -> None:
    m = MOBILENET
    blocks = [[([m["eager_ms"]] * 3, [m["compiled_ms"]] * 3)] * 5]
    write_paired_replicates(
        sweep, "m", backend, blocks, gpu_ms_per_step=m["gpu"], eager_gpu_ms_per_step=m["eager_gpu"],
        gpu_ms_windows=[m["gpu"] - 0.01, m["gpu"], m["gpu"] + 0.02],
        eager_gpu_ms_windows=[m["eager_gpu"] - 0.02, m["eager_gpu"], m["eager_gpu"] + 0.01],
        launches_per_step=m["launches"], host_ms_per_step=m["host_ms"], eager_launches_per_step=1500.0,
        eager_host_ms_per_step=14.0, **H100,
    )  # fmt: skip


def test_the_gap_between_device_and_wall_speedups_is_explained_with_launches_and_cuda_graphs(
    tmp_path: Path,
) -> None:
    write_mobilenet(tmp_path)
    metrics = cell_metrics(load_sweep(tmp_path, warn=None))
    cell = metrics.iloc[0]
    m = MOBILENET
    assert cell["device_speedup"] == pytest.approx(m["eager_gpu"] / m["gpu"])  # 1.38x
    assert cell["speedup"] == pytest.approx(m["eager_ms"] / m["compiled_ms"])  # 0.98x
    # One run: Welch over the two sides' windows, labelled as a one-run wall interval is.
    windows = lambda values: RunLogs.from_values(np.zeros(3, np.int64), np.array(values), 1)  # noqa: E731
    low, high = welch_interval(
        windows([m["eager_gpu"] - 0.02, m["eager_gpu"], m["eager_gpu"] + 0.01]),
        windows([m["gpu"] - 0.01, m["gpu"], m["gpu"] + 0.02]),
    )
    assert (cell["device_speedup_low"], cell["device_speedup_high"]) == pytest.approx((low[0], high[0]))
    assert cell["device_interval"] == cell["interval"] == "within one process"
    assert cell["device_speedup_low"] > cell["speedup_high"] * (1 + GAP)
    # Compiled: GPU 12.81 of an 18.4 ms step, idle 30%; eager 17.66 of 18.0, idle 2%.
    assert cell["launch_bound"] and not cell["eager_launch_bound"]
    assert cell["predicted_step_ms"] == pytest.approx(max(m["gpu"], m["host_ms"]))
    host = summary_table(metrics).text["host"].iloc[0]
    us = m["host_ms"] * 1e3 / m["launches"]
    graphed = max(m["gpu"], us / 1e3)  # one launch a step
    assert f"{m['launches']:,.0f} launches/step at {us:.1f} µs" in host
    assert "CUDA graphs (mode=reduce-overhead)" in host
    assert host.endswith(fmt_speedup(cell["speedup"] * cell["median_step_ms"] / graphed))


def test_a_cell_that_replays_cuda_graphs_is_told_its_launches_lie_outside_them(tmp_path: Path) -> None:
    write_mobilenet(tmp_path, "cudagraphs")
    host = summary_table(cell_metrics(load_sweep(tmp_path, warn=None))).text["host"].iloc[0]
    assert host.endswith("ms of GPU, outside its CUDA graphs") and "reduce-overhead" not in host


def test_no_gap_is_explained_where_the_compiled_side_is_not_launch_bound(tmp_path: Path) -> None:
    m = MOBILENET
    blocks = [[([m["eager_ms"]] * 3, [m["gpu"] * 1.05] * 3)] * 5]  # compiled idle 5%: GPU-bound
    write_paired_replicates(
        tmp_path, "m", "inductor", blocks, gpu_ms_per_step=m["gpu"], eager_gpu_ms_per_step=m["eager_gpu"],
        launches_per_step=m["launches"], host_ms_per_step=10.0, **H100,
    )  # fmt: skip
    metrics = cell_metrics(load_sweep(tmp_path, warn=None))
    assert not metrics["launch_bound"].iloc[0] and not metrics["host_dependent"].iloc[0]
    assert summary_table(metrics).text["host"].iloc[0] == ""


def test_unpaired_cells_take_the_eager_cells_gpu_time(tmp_path: Path) -> None:
    """Two runs each: Welch over runs; the eager cell launch-bound, the compiled one not."""
    eager_gpu, compiled_gpu = [7.5, 7.6], [5.6, 5.5]
    for repeat in range(2):
        write_cell(
            tmp_path,
            "e",
            step_ms=[11.5, 11.6, 11.4],
            attempt=repeat + 1,
            repeat=repeat,
            gpu_ms_per_step=eager_gpu[repeat],
            launches_per_step=1600.0,
            host_ms_per_step=11.0,
            **H100,
        )
        write_cell(tmp_path, "c", "inductor", step_ms=[6.0, 6.1, 5.9], attempt=repeat + 1, repeat=repeat,
                   gpu_ms_per_step=compiled_gpu[repeat], **H100)  # fmt: skip
    cells = metrics_of(tmp_path)
    compiled = cells["c"]
    assert compiled["device_speedup"] == pytest.approx(
        geometric_mean(eager_gpu) / geometric_mean(compiled_gpu)
    )
    to_logs = lambda values: RunLogs.from_values(np.zeros(2, np.int64), np.array(values), 1)  # noqa: E731
    low, high = welch_interval(to_logs(eager_gpu), to_logs(compiled_gpu))
    assert (compiled["device_speedup_low"], compiled["device_speedup_high"]) == pytest.approx(
        (low[0], high[0])
    )
    assert compiled["device_interval"] == "across 2 runs" and math.isnan(compiled["eager_gpu_ms"])
    assert cells["e"]["launch_bound"] and not compiled["launch_bound"] and compiled["host_dependent"]
    assert not cells["e"]["host_dependent"]  # the eager cell against itself
    metrics = cell_metrics(load_sweep(tmp_path, warn=None))
    why = compact_table(metrics).text.set_index(metrics["cell_id"].to_numpy())["why"]
    assert (
        why["c"] == f"eager cell launch-bound, {11.0e3 / 1600:.1f} µs/launch" and why["e"] == "launch-bound"
    )
    text = summary_table(metrics).text.set_index("cell")
    assert text.loc["c", "host"].startswith(
        f"{fmt_speedup(compiled['speedup'])} on this host at {11.0e3 / 1600:.1f} µs/launch"
    )


def test_cpu_and_distributed_cells_say_they_have_no_device_time(tmp_path: Path) -> None:
    write_cell(tmp_path, "cpu-e", step_ms=[10.0, 10.1])
    write_cell(tmp_path, "cpu-c", "inductor", step_ms=[8.0, 8.1])
    write_ranks_cell(tmp_path, "ddp-e", "eager", [[10.0, 10.1]] * 2, size="small", **H100)
    write_ranks_cell(tmp_path, "ddp-c", "inductor", [[8.0, 8.1]] * 2, size="small", **H100)
    metrics = cell_metrics(load_sweep(tmp_path, warn=None))
    assert metrics["device_speedup"].isna().all() and not metrics["launch_bound"].any()
    text = summary_table(metrics).text.set_index("cell")["device speedup [95% CI]"]
    assert text["cpu-c"] == text["cpu-e"] == "no device time (CPU)"
    assert text["ddp-c"] == text["ddp-e"] == "no device time (2 processes)"
    compact = compact_table(metrics)
    assert "GPU alone" not in compact.text.columns and "GPU alone" not in compact.note  # no cell has one


def test_an_old_sweep_is_labelled_from_its_lifted_gpu_time_against_the_measured_step(tmp_path: Path) -> None:
    """Before issue 39 a run row had the window's busy share and its (profiled, slowed) step: the
    upgrade lifts their product to gpu_ms_per_step, and the label reads it against the measured step,
    where the old rule read the slowed window's idle share (40% here: launch-bound)."""
    busy, profiled, steps = 0.6, 16.0, [10.0, 10.1, 9.9]
    write_cell(tmp_path, "old", step_ms=steps, gpu_busy_share=busy, profiled_step_ms=profiled, **H100)
    cell = metrics_of(tmp_path)["old"]
    assert cell["gpu_ms"] == pytest.approx(busy * profiled)
    assert 1 - busy > LAUNCH_BOUND and 1 - busy * profiled / 10.0 < LAUNCH_BOUND
    assert not cell["launch_bound"] and math.isnan(cell["launches_per_step"])
    assert math.isnan(cell["predicted_step_ms"])  # no launches: no prediction


def test_an_old_paired_cell_is_host_dependent_at_the_hosts_speed_per_tiny_op(tmp_path: Path) -> None:
    """Without launches, the host-dependent line names the host's µs per tiny op before measuring."""
    write_paired_replicates(
        tmp_path, "old", "cudagraphs", [[([15.6] * 3, [7.96] * 3)] * 3], gpu_busy_share=0.9,
        profiled_step_ms=8.2, eager_gpu_busy_share=0.37, eager_profiled_step_ms=20.3, host_op_us=7.5, **H100,
    )  # fmt: skip
    metrics = cell_metrics(load_sweep(tmp_path, warn=None))
    cell = metrics.iloc[0]
    assert cell["eager_gpu_ms"] == pytest.approx(0.37 * 20.3) and cell["gpu_ms"] == pytest.approx(0.9 * 8.2)
    assert cell["eager_launch_bound"] and not cell["launch_bound"] and cell["host_dependent"]
    assert summary_table(metrics).text["host"].iloc[0] == (
        f"{fmt_speedup(cell['speedup'])} on this host at 7.5 µs/tiny op; "
        f"{fmt_speedup(0.37 * 20.3 / (0.9 * 8.2))} on the GPU alone"
    )


def test_the_model_predicts_the_longer_of_gpu_and_host() -> None:
    """max(GPU ms, launches x µs / 1000), by hand: mobilenetv3's compiled side at 15 µs per launch is
    the host's (18 ms), at 5 µs the GPU's; a CUDA-graph replay (one launch) is the GPU's."""
    gpu = np.array([12.81, 12.81, 12.81, np.nan])
    got = predicted_step_ms(gpu, [1200.0, 1200.0, 1.0, 1200.0], [15.0, 5.0, 15.0, 15.0])
    assert got[:3] == pytest.approx([18.0, 12.81, 12.81]) and np.isnan(got[3])
    assert predicted_step_ms(7.5, 2000.0, 7.6) == pytest.approx(15.2)


def test_the_model_predicts_a_host_dependent_speedup_on_a_faster_host(tmp_path: Path) -> None:
    """The cudagraphs cell's eager side is the host's: on a host whose launches take 0.8x the µs, its
    predicted step shrinks by that and the speedup with it; its compiled side, the GPU's, stays."""
    write_cudagraphs(tmp_path)
    metrics = cell_metrics(load_sweep(tmp_path, warn=None))
    cell = metrics.iloc[0]
    eager_host = cell["eager_launches_per_step"] * cell["eager_host_us_per_launch"] / 1e3

    def speedup(host_factor: float) -> float:  # the model's eager step over its compiled step
        eager, compiled = (
            predicted_step_ms(
                cell[f"{side}gpu_ms"], cell[f"{side}launches_per_step"],
                cell[f"{side}host_us_per_launch"] * host_factor,
            )
            for side in ("eager_", "")
        )  # fmt: skip
        return float(eager / compiled)

    assert cell["eager_predicted_step_ms"] == pytest.approx(eager_host)
    assert speedup(1.0) == pytest.approx(eager_host / cell["gpu_ms"])
    assert speedup(0.8) == pytest.approx(0.8 * eager_host / cell["gpu_ms"])


def test_a_cell_without_windows_has_its_device_speedup_without_an_interval(tmp_path: Path) -> None:
    m = MOBILENET
    write_paired_replicates(
        tmp_path, "m", "inductor", [[([m["eager_ms"]] * 3, [m["compiled_ms"]] * 3)] * 5],
        gpu_ms_per_step=m["gpu"], eager_gpu_ms_per_step=m["eager_gpu"], **H100,
    )  # fmt: skip
    cell = metrics_of(tmp_path)["m"]
    assert cell["device_speedup"] == pytest.approx(m["eager_gpu"] / m["gpu"])
    assert pd.isna(cell["device_speedup_low"]) and cell["device_interval"] is None
