"""The report page `report/index.html`, opened in a real headless chromium as a person would open
it: on its own (copied away from the report's other files, so that it has to be self-contained),
it shows every figure decoded and painted, every table with all its rows, the problems found and
the environment, logs no error and requests nothing but itself."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from analysis.report import analyze
from orchestrator.cli.main import main
from tests.helpers.analysis_sweeps import TRAINING_FIGURES, write_cell, write_seminar_sweep
from tests.helpers.browser import Page, open_page

#: Tables of the seminar sweep without --reference: the sweep's three and the seminar's three.
TABLES = ["summary", "status", "geomean", "break_even", "seminar_table1", "seminar_table2", "seminar_table3"]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A sweep with a broken cell, analysed; its report directory and its index.html copied alone."""
    sweep = write_seminar_sweep(tmp_path_factory.mktemp("sweep"))
    broken = write_cell(sweep, "broken", "aot_eager", step_ms=[5.0]) / "run.parquet"
    broken.write_bytes(broken.read_bytes()[:100])
    assert main(["analyze", str(sweep)]) == 0
    alone = tmp_path_factory.mktemp("alone") / "index.html"
    shutil.copy(sweep / "report" / "index.html", alone)
    return sweep / "report", alone


@pytest.fixture(scope="module")
def page(report: tuple[Path, Path]) -> Iterator[Page]:
    yield from open_page(report[1].as_uri())


def test_the_page_loads_without_errors_or_requests(report: tuple[Path, Path], page: Page) -> None:
    assert page.errors == []
    assert page.requests and all(
        url == report[1].as_uri() or url.startswith("data:image/png;base64,") for url in page.requests
    ), page.requests
    assert page.evaluate("document.title") == "compilebench report"


def test_every_figure_is_decoded_and_painted(report: tuple[Path, Path], page: Page, tmp_path: Path) -> None:
    images = page.evaluate(
        """[...document.images].map(i => {
        const r = i.getBoundingClientRect();  // the content box: inside the border
        return {alt: i.alt, complete: i.complete, width: i.naturalWidth, height: i.naturalHeight,
                box: [r.left + i.clientLeft + scrollX, r.top + i.clientTop + scrollY, """
        """i.clientWidth, i.clientHeight]};
    })"""
    )
    assert [image["alt"] for image in images] == TRAINING_FIGURES
    shot = Image.open(page.screenshot(tmp_path / "page.png")).convert("L")
    for image in images:
        left, top, width, height = (round(v) for v in image["box"])
        assert width > 300 and height > 100, image  # laid out at a readable size
        with Image.open(report[0] / "plots" / f"{image['alt']}.png") as png:
            assert image["complete"] and (image["width"], image["height"]) == png.size, image
            expected = np.asarray(png.convert("L").resize((width, height), Image.Resampling.BILINEAR), float)
        painted = np.asarray(shot.crop((left, top, left + width, top + height)), float)
        # What the screenshot shows there is the figure's file, scaled: all of it, not a part.
        assert np.abs(painted - expected).mean() < 8, (
            f"{image['alt']}: the screenshot does not show the figure"
        )


def test_every_table_shows_all_its_rows(report: tuple[Path, Path], page: Page) -> None:
    shown = page.evaluate("""Object.fromEntries([...document.querySelectorAll('h3[id^="table-"]')].map(h => [
        h.id.slice(6), h.nextElementSibling.querySelectorAll('tbody tr').length]))""")
    assert list(shown) == TABLES
    for table in analyze(report[0].parent, warn=None).tables:  # each with every row of the text tables have
        assert shown[table.name] == len(table.text) > 0, table.name
    cells = page.evaluate("""[...document.querySelector('#table-summary + div tbody').rows]
        .map(r => r.cells[0].textContent)""")
    assert "broken" in cells and "r34-inductor" in cells  # the unreadable and the failed cell stay listed


def test_problems_and_environment_are_on_the_page(report: tuple[Path, Path], page: Page) -> None:
    problems = page.evaluate("[...document.querySelectorAll('ul.problems li')].map(li => li.textContent)")
    assert any(str(report[0].parent / "cells" / "broken" / "run.parquet") in p for p in problems), problems
    environment = page.evaluate("""Object.fromEntries([...document.querySelectorAll(
        '#environment + div tbody tr')].map(r => [r.cells[0].textContent, r.cells[1].textContent]))""")
    assert environment["GPU"] == "NVIDIA H100 80GB HBM3" and environment["device"] == "cuda:0"


def test_the_page_is_readable_in_a_narrow_window(page: Page) -> None:
    # Wide tables scroll inside their box; the page itself never needs scrolling sideways.
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert page.evaluate(
        "[...document.querySelectorAll('div.scroll')].some(d => d.scrollWidth > d.clientWidth)"
    )
