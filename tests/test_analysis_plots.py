"""Figures from generated sweeps: the files exist, decode as images of the figure size, and show
what they claim to (bar heights are the speedups, the warm-up spike is inside the axes)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from analysis.collect import SweepData, load_sweep
from analysis.metrics import cell_metrics
from analysis.plots import DPI, FIGSIZE, FIGURES, speedup_figure, step_time_figure, write_plots
from tests.analysis_sweeps import write_cell, write_seminar_sweep

PNG_SIZE = (round(FIGSIZE[0] * DPI), round(FIGSIZE[1] * DPI))
SVG_SIZE = (f"{FIGSIZE[0] * 72:g}pt", f"{FIGSIZE[1] * 72:g}pt")  # SVG measures in points


@pytest.fixture(scope="module")
def seminar(tmp_path_factory: pytest.TempPathFactory) -> tuple[SweepData, object]:
    data = load_sweep(write_seminar_sweep(tmp_path_factory.mktemp("seminar")), warn=None)
    return data, cell_metrics(data)


def check_images(paths: dict[str, list[Path]]) -> None:
    assert set(paths) == set(FIGURES)
    for name, (png, svg) in paths.items():
        with Image.open(png) as image:
            assert image.format == "PNG" and image.size == PNG_SIZE, name
            pixels = np.asarray(image.convert("L"))
        assert pixels.min() < 128 < pixels.max(), f"{name}: a blank image"
        root = ET.parse(svg).getroot()
        assert root.tag.endswith("svg") and (root.get("width"), root.get("height")) == SVG_SIZE, name


def test_every_figure_is_written_as_png_and_svg(seminar, tmp_path: Path) -> None:
    data, metrics = seminar
    check_images(write_plots(metrics, data.steps, tmp_path / "plots"))


def test_figures_without_data_are_still_written(tmp_path: Path) -> None:
    write_cell(tmp_path, "f", "inductor", status="failed", error="boom")
    data = load_sweep(tmp_path, warn=None)
    check_images(write_plots(cell_metrics(data), data.steps, tmp_path / "report" / "plots"))


def test_speedup_bars_are_the_speedups(seminar) -> None:
    data, metrics = seminar
    ax = speedup_figure(metrics, data.steps).axes[0]
    heights = sorted(round(bar.get_height(), 9) for bar in ax.patches)
    expected = metrics[(metrics["backend"] != "eager") & metrics["speedup"].notna()]["speedup"]
    assert heights == sorted(round(v, 9) for v in expected)


def test_step_time_panels_show_the_warm_up_spike(seminar) -> None:
    data, metrics = seminar
    fig = step_time_figure(metrics, data.steps)
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.lines]
    assert len(panels) == 4  # gpt2, shakespeare_char, resnet18, resnet34
    for ax in panels:
        top = max(line.get_ydata().max() for line in ax.lines)
        assert ax.get_yscale() == "log" and ax.get_ylim()[1] >= top
        assert ax.patches, "the warm-up steps are shaded"
