"""Figures from generated sweeps: the files exist and decode at the figure's size, and each figure
shows what it claims to — the forest plot's points and intervals are the speedups, sorted and
labelled, and fit for 1 and for 200 cells; the parts of the data-wait bars add up; the step-time
panels cover the measured steps and mark the warm-up; the break-even counts are compile time /
(eager step - compiled step); a backend has one colour in every figure; a paired cell shows its own
eager side (not the separate eager cell) and each side's GPU time per step, and the forest plot its
device-time speedup beside the wall one."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from PIL import Image

from analysis.cells.metrics import cell_metrics
from analysis.reading.collect import SweepData, load_sweep
from analysis.rendering.figure_layout import DPI, FIGSIZE, MAX_ROWS, rows_height
from analysis.rendering.palette import KNOWN
from analysis.rendering.text import fmt_number, fmt_speedup
from analysis.report import analyze, write_report
from analysis.studies.sweep.figures import (
    FIGURES,
    compile_speedup_figure,
    data_wait_figure,
    mfu_figure,
    speedup_figure,
    step_time_figure,
)
from tests.helpers.analysis_sweeps import (
    TRAINING_FIGURES,
    WARMUP_MS,
    write_cell,
    write_paired_replicates,
    write_seminar_sweep,
)
from workloads.contract.schema import write_parquet_atomic


@pytest.fixture(scope="module")
def seminar(tmp_path_factory: pytest.TempPathFactory) -> tuple[SweepData, pd.DataFrame]:
    data = load_sweep(write_seminar_sweep(tmp_path_factory.mktemp("seminar")), warn=None)
    return data, cell_metrics(data)


def report_figures(sweep: Path) -> dict[str, list[Path]]:
    """The figures `analyze` writes into the sweep's report: {name: [png, svg]}."""
    plots = write_report(analyze(sweep, warn=None)).parent / "plots"
    return {png.stem: [png, png.with_suffix(".svg")] for png in sorted(plots.glob("*.png"))}


def check_images(paths: dict[str, list[Path]]) -> None:
    assert set(paths) == set(TRAINING_FIGURES)
    for name, (png, svg) in paths.items():
        with Image.open(png) as image:
            assert image.format == "PNG" and image.size[0] == round(FIGSIZE[0] * DPI), name
            height = image.size[1]
            pixels = np.asarray(image.convert("L"))
        assert pixels.min() < 128 < pixels.max(), f"{name}: a blank image"
        root = ET.parse(svg).getroot()  # the same figure: SVG measures in points (72 per inch)
        assert root.tag.endswith("svg") and root.get("width") == f"{FIGSIZE[0] * 72:g}pt", name
        assert float(root.get("height").removesuffix("pt")) == pytest.approx(height / DPI * 72, abs=1), name


def test_every_figure_is_written_as_png_and_svg(tmp_path: Path) -> None:
    check_images(report_figures(write_seminar_sweep(tmp_path)))


def test_figures_without_data_are_still_written(tmp_path: Path) -> None:
    write_cell(tmp_path, "f", "inductor", status="failed", error="boom")
    check_images(report_figures(tmp_path))


def tick_texts(ax) -> list[str]:
    return [label.get_text() for label in ax.get_yticklabels()]


def test_the_forest_plot_is_sorted_with_intervals_on_a_log_axis(seminar) -> None:
    data, metrics = seminar
    fig = speedup_figure(metrics, data.steps)
    ax, values = fig.axes
    compiled = metrics[metrics["backend"] != "eager"].set_index("cell_id")
    with_value = compiled[compiled["speedup"].notna()].sort_values("speedup", ascending=False)
    assert ax.get_xscale() == "log"
    assert tick_texts(ax) == [  # fastest on top; cells without a speedup at the bottom, saying why
        "resnet small tf32 b128 accum 1 · torchscript",
        "gpt-6x6x384 small bf16 b64 accum 1 · inductor (max-autotune)",
        "gpt-12x12x768 medium bf16 b12 accum 40 · inductor",
        "resnet medium tf32 b128 accum 1 · torchscript",
        "gpt-6x6x384 small bf16 b64 accum 1 · inductor",
        "resnet small tf32 b128 accum 1 · inductor",
        "gpt-12x12x768 medium bf16 b12 accum 40 · cudagraphs",
        "resnet medium tf32 b128 accum 1 · inductor",
    ]
    assert tick_texts(values)[:2] == ["1.94x [1.76, 2.13]", "1.31x [1.14, 1.50]"]
    assert tick_texts(values)[-2:] == ["not_compiled", "failed"]
    points = {
        round(y): x
        for line in ax.lines
        if line.get_marker() == "o"
        for x, y in zip(line.get_xdata(), line.get_ydata())
    }
    assert [points[row] for row in range(len(with_value))] == pytest.approx(with_value["speedup"].tolist())
    bars = [
        c for c in ax.collections if isinstance(c, LineCollection)
    ]  # the error bars (the x marks: points)
    intervals = sorted((seg[0][1], seg[0][0], seg[1][0]) for c in bars for seg in c.get_segments())
    assert [bound for _, low, high in intervals for bound in (low, high)] == pytest.approx(
        [bound for pair in zip(with_value["speedup_low"], with_value["speedup_high"]) for bound in pair]
    )
    low, high = ax.get_xlim()
    assert low < with_value["speedup_low"].min() and high > with_value["speedup_high"].max()


def write_workloads(sweep: Path, count: int) -> None:
    """`count` workloads (batch sizes), each eager and two compiled backends, speedups 0.6x..2x."""
    speedups = np.geomspace(0.6, 2.0, 2 * count)
    for b in range(count):
        eager = 20.0 + b % 7
        write_cell(sweep, f"e{b}", "eager", step_ms=[eager, eager + 1, eager - 1], batch_size=b + 1)
        for k, backend in enumerate(("inductor", "aot_eager")):
            step = eager / speedups[2 * b + k]
            write_cell(
                sweep, f"{backend}{b}", backend, step_ms=[step, step + 0.5, step - 0.5], batch_size=b + 1
            )


def check_rows_fit(fig: Figure, rows: int) -> None:
    """The figure is as high as its rows need, and its row labels (both sides) lie inside it without
    overlapping each other."""
    assert fig.get_size_inches()[1] == pytest.approx(rows_height(rows))
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    width, height = fig.bbox.width, fig.bbox.height
    for ax in fig.axes[:2]:
        boxes = sorted(
            (label.get_window_extent(renderer) for label in ax.get_yticklabels()), key=lambda b: -b.y0
        )
        assert len(boxes) == rows
        for box in boxes:
            assert 0 <= box.x0 and box.x1 <= width and 0 <= box.y0 and box.y1 <= height, box
        for upper, lower in zip(boxes, boxes[1:]):
            assert lower.y1 <= upper.y0 + 0.5, "row labels overlap"


def test_the_forest_plot_fits_one_cell_and_two_hundred(tmp_path: Path) -> None:
    write_workloads(tmp_path, MAX_ROWS // 2 + 10)
    data = load_sweep(tmp_path, warn=None)
    metrics = cell_metrics(data)
    one = metrics[metrics["batch_size"] == 1].iloc[:2]  # eager and inductor
    check_rows_fit(speedup_figure(one, data.steps), 1)
    two_hundred = metrics[metrics["batch_size"] <= MAX_ROWS // 2]
    fig = speedup_figure(two_hundred, data.steps)
    check_rows_fit(fig, MAX_ROWS)
    assert fig.get_size_inches()[1] <= rows_height(MAX_ROWS)
    # Beyond MAX_ROWS the figure keeps its height, shows the extremes and says how many it left out.
    fig = speedup_figure(metrics, data.steps)
    check_rows_fit(fig, MAX_ROWS)
    assert f"({MAX_ROWS} of {MAX_ROWS + 20} cells" in fig.axes[0].get_title()
    shown = [float(text.split("x")[0]) for text in tick_texts(fig.axes[1])]
    speedups = metrics["speedup"].dropna().sort_values(ascending=False)
    assert shown[0] == pytest.approx(speedups.iloc[0], abs=0.005)
    assert shown[-1] == pytest.approx(speedups.iloc[-1], abs=0.005)


def legend_colors(fig: Figure) -> dict[str, str]:
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    colors = {}
    for legend in legends:
        for handle, text in zip(legend.legend_handles, legend.get_texts()):
            color = handle.get_color() if hasattr(handle, "get_color") else handle.get_facecolor()
            colors[text.get_text()] = to_hex(color)
    return colors


def test_a_backend_has_one_colour_in_every_figure(seminar, tmp_path: Path) -> None:
    data, metrics = seminar
    seen: dict[str, set[str]] = {}
    for name in ("speedup", "step_times", "compile_vs_speedup", "data_wait"):
        for label, color in legend_colors(FIGURES[name](metrics, data.steps)).items():
            seen.setdefault(label, set()).add(color)
    ax = mfu_figure(metrics, data.steps).axes[0]  # no legend: each row's bar
    for text, bar in zip(tick_texts(ax), ax.patches):
        seen.setdefault(text.split(" · ")[1], set()).add(to_hex(bar.get_facecolor()))
    for backend in ("eager", "inductor", "inductor (max-autotune)", "torchscript"):
        assert seen[backend] == {KNOWN[backend]}, backend
    # Another sweep with other backends: inductor keeps its colour.
    write_cell(tmp_path, "e", "eager", step_ms=[10.0, 11.0, 12.0])
    write_cell(tmp_path, "a", "aot_eager", step_ms=[9.0, 10.0, 11.0])
    write_cell(tmp_path, "i", "inductor", step_ms=[8.0, 9.0, 10.0])
    other = load_sweep(tmp_path, warn=None)
    assert legend_colors(speedup_figure(cell_metrics(other), other.steps))["inductor"] == KNOWN["inductor"]


def test_data_wait_bars_add_up_for_data_bound_cells(tmp_path: Path) -> None:
    warm = [0.0] * len(WARMUP_MS)
    write_cell(tmp_path, "e", "eager", step_ms=[100.0, 100.0, 100.0], data_ms=[*warm, 90.0, 95.0, 85.0])
    write_cell(tmp_path, "i", "inductor", step_ms=[95.0, 95.0, 95.0], data_ms=[*warm, 90.0, 90.0, 90.0])
    # A wait timed longer than its step (host and device clocks): the bar is all wait, never negative.
    write_cell(tmp_path, "a", "aot_eager", step_ms=[10.0, 10.0, 10.0], data_ms=[*warm, 12.0, 12.0, 12.0])
    data = load_sweep(tmp_path, warn=None)
    metrics = cell_metrics(data)
    ax, values = data_wait_figure(metrics, data.steps).axes
    bars = ax.patches
    rest, wait = bars[: len(bars) // 2], bars[len(bars) // 2 :]
    shares = dict(zip(tick_texts(ax), zip((b.get_width() for b in rest), (b.get_width() for b in wait))))
    assert shares["gpt tiny · eager"] == pytest.approx((10.0, 90.0))
    assert shares["gpt tiny · inductor"] == pytest.approx((100 * 5 / 95, 100 * 90 / 95))
    assert shares["gpt tiny · aot_eager"] == pytest.approx((0.0, 100.0))
    assert all(r >= 0 and w >= 0 and r + w == pytest.approx(100.0) for r, w in shares.values())
    assert "100.0 ms/step, 90% waiting" in tick_texts(values)


def test_step_time_panels_cover_the_measured_steps_and_mark_the_warm_up(seminar) -> None:
    data, metrics = seminar
    fig = step_time_figure(metrics, data.steps)
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.lines]
    assert [ax.get_title() for ax in panels] == [
        "gpt-12x12x768 medium bf16 b12 accum 40",
        "gpt-6x6x384 small bf16 b64 accum 1",
        "resnet small tf32 b128 accum 1",
        "resnet medium tf32 b128 accum 1",
    ]
    assert fig.get_size_inches()[1] > FIGSIZE[1] / 2  # two rows of panels
    measured = data.steps[data.steps["phase"] == "measure"]
    for ax in panels:
        times = np.concatenate([line.get_ydata()[len(WARMUP_MS) :] for line in ax.lines])
        low, high = ax.get_ylim()
        assert ax.get_yscale() == "log" and low < times.min() and times.max() < high
        assert set(times) <= set(measured["step_time_ms"])
        (shade,) = ax.patches  # the warm-up steps 0 and 1
        assert shade.get_x() == -0.5 and shade.get_width() == len(WARMUP_MS)
        assert "warm-up up to 5,000 ms" in ax.texts[0].get_text()  # above the panel: written down


def test_break_even_is_compile_time_over_the_step_saved(seminar) -> None:
    data, metrics = seminar
    ax = compile_speedup_figure(metrics, data.steps).axes[0]
    notes = {text.get_text() for text in ax.texts}
    # compile 3.5 s each; gpt2: eager 3010 ms, inductor 2610 ms: 3500 / 400 = 8.75 steps; resnet18
    # torchscript 3500 / (310 - 160); shakespeare_char max-autotune 3500 / (17 - 13); slower: never.
    assert {
        "gpt-12x12x768 medium bf16 b12 accum 40: 9 steps",
        "resnet small tf32 b128 accum 1: 23 steps",
        "gpt-6x6x384 small bf16 b64 accum 1: 875 steps",
        "gpt-6x6x384 small bf16 b64 accum 1: never",
    } <= notes
    curves = {
        text.get_text().strip(): text
        for text in ax.texts
        if text.get_text().strip().endswith(" steps") and ":" not in text.get_text()
    }
    assert "10 steps" in curves and "100 steps" in curves
    dashed = [line for line in ax.lines if line.get_linestyle() == "--"]
    for line, label in zip(dashed, sorted(curves, key=lambda t: int(t.split()[0].replace(",", "")))):
        n = int(label.split()[0].replace(",", ""))
        x, y = line.get_xdata(), line.get_ydata()
        assert y == pytest.approx(1 / (1 - x / n))


def test_a_warm_compile_is_a_second_point_with_its_own_break_even(tmp_path: Path) -> None:
    write_cell(tmp_path, "e", "eager", step_ms=[10.0, 10.0, 10.0])
    write_cell(tmp_path, "i", "inductor", step_ms=[8.0, 8.0, 8.0], compile_time_s=3.5)
    data = load_sweep(tmp_path, warn=None)
    data.cells["compile_warm_s"] = data.cells["cell_id"].map({"i": 0.5})  # as run.parquet will have it
    ax = compile_speedup_figure(cell_metrics(data), data.steps).axes[0]
    assert "gpt tiny: 1,750 steps (warm 250)" in {text.get_text() for text in ax.texts}
    # Compile time in eager steps: cold 3,500 / 10 ms = 350 (filled), warm 500 / 10 = 50 (hollow).
    points = {
        (round(float(line.get_xdata()[0])), line.get_markerfacecolor() == "white")
        for line in ax.lines
        if line.get_marker() == "o" and len(line.get_xdata())
    }
    assert {(350, False), (50, True)} <= points
    assert ax.get_xlim()[0] < 50


#: A paired inductor cell of gpt tiny, 3 replicates of 4 pairs: eager blocks about 16 ms, compiled 14
#: (paired speedup about 1.14x); the separate eager cell ran at 207 ms in a process of its own.
EAGER_BLOCKS, COMPILED_BLOCKS = (16.0, 15.5, 16.5, 16.2), (14.0, 13.8, 14.1, 14.3)
#: GPU time per step of the compiled and the eager side, per replicate (the median of its windows).
GPU_RUNS, EAGER_GPU_RUNS = (11.9, 12.0, 12.1), (15.1, 14.9, 15.0)
#: Over the replicates (geometric means): a device-time speedup of about 1.25x.
GPU_MS, EAGER_GPU_MS = (float(np.exp(np.mean(np.log(runs)))) for runs in (GPU_RUNS, EAGER_GPU_RUNS))


@pytest.fixture(scope="module")
def paired(tmp_path_factory: pytest.TempPathFactory) -> tuple[SweepData, pd.DataFrame]:
    sweep = tmp_path_factory.mktemp("paired")
    waits = [0.0] * len(WARMUP_MS) + [0.5] * 3
    write_cell(sweep, "e", "eager", step_ms=[207.0, 206.0, 208.0], data_ms=waits)
    blocks = [[([e, e], [c, c, c]) for e, c in zip(EAGER_BLOCKS, COMPILED_BLOCKS)]] * 3
    gpu = [
        {"gpu_ms_per_step": ms, "gpu_ms_windows": [ms - 0.1, ms, ms + 0.1], "device_windows": 3,
         "eager_gpu_ms_per_step": eager, "eager_gpu_ms_windows": [eager - 0.1, eager, eager + 0.1]}
        for ms, eager in zip(GPU_RUNS, EAGER_GPU_RUNS)
    ]  # fmt: skip
    steps = write_paired_replicates(sweep, "p", "inductor", blocks, replicate_run=gpu) / "steps.parquet"
    # The workload times each step's wait for data, as it does on either side: 0.5 ms of every step.
    table = pq.read_table(steps)
    waits = pa.array(np.full(len(table), 0.5), pa.float64())
    write_parquet_atomic(
        table.set_column(table.schema.get_field_index("data_time_ms"), "data_time_ms", waits), steps
    )
    data = load_sweep(sweep, warn=None)
    return data, cell_metrics(data)


def test_a_paired_cell_s_step_panel_shows_its_own_eager_side_and_the_gpu_time(paired) -> None:
    data, metrics = paired
    cell = metrics.set_index("cell_id").loc["p"]
    assert cell["speedup_method"] == "paired" and cell["speedup"] < 1.2  # not 207 / 14
    fig = step_time_figure(metrics, data.steps)
    (ax,) = [ax for ax in fig.axes if ax.get_visible() and ax.lines]
    inductor = to_hex(KNOWN["inductor"])
    levels = [line for line in ax.lines if line.get_linestyle() == "--"]
    # Its own eager side, in its colour, at the step its speedup is over; not at the eager cell's.
    assert [(to_hex(line.get_color()), *set(line.get_ydata())) for line in levels] == [
        (inductor, pytest.approx(cell["eager_step_ms"]))
    ]
    # Per replicate the median of its eager blocks' medians (all replicates alike here).
    assert cell["eager_step_ms"] == pytest.approx(np.median(EAGER_BLOCKS))
    assert cell["eager_step_ms"] == pytest.approx(cell["median_step_ms"] * cell["speedup"], rel=0.02)
    # The GPU time per step of each side: filled diamonds for its own steps, hollow for its eager side.
    diamonds = {
        line.get_markerfacecolor() == "white": (to_hex(line.get_color()), *set(line.get_ydata()))
        for line in ax.lines
        if line.get_marker() == "d"
    }
    assert diamonds == {
        False: (inductor, pytest.approx(GPU_MS)),
        True: (inductor, pytest.approx(EAGER_GPU_MS)),
    }
    low, high = ax.get_ylim()
    assert low < cell["gpu_ms"] and 207 < high
    legend = [text.get_text() for text in fig.legends[0].get_texts()]
    assert "eager (paired, same process): its measured step" in legend and "GPU time per step" in legend


def test_the_time_per_cell_rows_show_a_paired_cell_s_eager_side_and_the_gpu_share(paired) -> None:
    data, metrics = paired
    cell = metrics.set_index("cell_id").loc["p"]
    ax, values = data_wait_figure(metrics, data.steps).axes
    assert tick_texts(ax) == ["gpt tiny · eager", "gpt tiny · inductor", "↳ eager (paired, same process)"]
    texts = tick_texts(values)
    assert texts[1].startswith(f"{fmt_number(cell['mean_step_ms'])} ms/step") and texts[1].endswith(
        ", GPU 12.00 ms"
    )
    assert texts[2] == f"{fmt_number(cell['eager_step_ms'])} ms/step (median), GPU 15.00 ms"
    inner = {
        round(bar.get_y() + bar.get_height() / 2): bar.get_width()
        for bar in ax.patches
        if bar.get_hatch() == "...."
    }
    # The share of each side's step the GPU worked; the eager cell has no GPU time: no inner bar.
    assert inner == pytest.approx(
        {1: 100 * GPU_MS / cell["mean_step_ms"], 2: 100 * EAGER_GPU_MS / cell["eager_step_ms"]}
    )


def test_the_forest_plot_sets_the_device_time_speedup_beside_the_wall_one(paired) -> None:
    data, metrics = paired
    cell = metrics.set_index("cell_id").loc["p"]
    fig = speedup_figure(metrics, data.steps)
    ax, values = fig.axes
    (wall,) = [line for line in ax.lines if line.get_marker() == "o"]
    (errorbar,) = [c for c in ax.containers if c.lines[0].get_marker() == "D"]
    device, _, (bars,) = errorbar.lines
    assert list(wall.get_xdata()) == pytest.approx([cell["speedup"]])
    assert list(device.get_xdata()) == pytest.approx([EAGER_GPU_MS / GPU_MS])  # of the runs' ratios, too
    assert device.get_ydata()[0] > wall.get_ydata()[0]  # below it, in its row
    ((low, high),) = [segment[:, 0] for segment in bars.get_segments()]
    assert (low, high) == pytest.approx((cell["device_speedup_low"], cell["device_speedup_high"]))
    assert low < EAGER_GPU_MS / GPU_MS < high  # over the runs' ratios: 1.27x, 1.24x, 1.24x
    wall_text = fmt_speedup(cell["speedup"], cell["speedup_low"], cell["speedup_high"])
    device_text = fmt_speedup(cell["device_speedup"], low, high)
    assert tick_texts(values) == [f"{wall_text} · GPU time {device_text}"]
    assert ax.get_xlim()[1] > high


def test_cells_without_gpu_time_draw_no_gpu_marks(seminar) -> None:
    data, metrics = seminar
    step_axes = step_time_figure(metrics, data.steps).axes
    assert not [line for ax in step_axes for line in ax.lines if line.get_marker() in ("d", "D")]
    assert not [line for ax in step_axes for line in ax.lines if line.get_linestyle() == "--"]
    ax = data_wait_figure(metrics, data.steps).axes[0]
    assert not [bar for bar in ax.patches if bar.get_hatch() == "...."]
    assert not [
        line for line in speedup_figure(metrics, data.steps).axes[0].lines if line.get_marker() == "D"
    ]
