"""`compilebench analyze`: from a sweep directory to tables (stdout) and a report page.

`analyze` opens the sweep once (a `Loaded`: analysis/cells/loaded.py `open_sweep`) and asks every study of the
one list (analysis/studies/registry.py) for its tables; `write_report` writes SWEEP_DIR/report/:
`tables/<name>.{md,tex,csv}`, every study's figures as `plots/<name>.{png,svg}`, and the index page
as `index.md` and `index.html` (analysis/rendering/page.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TextIO

from analysis.cells.loaded import Loaded, Settings, open_sweep
from analysis.reading.environment import environment_table
from analysis.rendering.page import Page, html_page, markdown_page
from analysis.rendering.text import ONE_TABLE, RENDERERS, Table, csv, latex, markdown
from analysis.studies.base import Study
from analysis.studies.gemm.table import GEMM_TABLE
from analysis.studies.registry import studies_for
from analysis.studies.sweep.table import SUMMARY
from workloads.contract.sweep_dir import REPORT_DIR, STDERR
from workloads.contract.vocabulary import NO_RESULT, UNREADABLE, count_states

TABLES_DIR = "tables"
PLOTS_DIR = "plots"
TITLE = "compilebench report"


@dataclass
class Analysis(Loaded):
    """A sweep read and analysed: what every study is given, the studies of its report and their
    tables."""

    studies: list[Study] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)

    @property
    def has_results(self) -> bool:
        """Whether any cell has a readable result (of any status)."""
        return bool((~self.metrics["status"].isin([NO_RESULT, UNREADABLE])).any())

    def count_line(self) -> str:
        """`12 cells: 9 completed, 2 failed, 1 no_result`."""
        return f"{len(self.metrics)} cells: {count_states(self.metrics['status'])}"


def analyze(
    sweep_dir: Path,
    reference: str | None = None,
    warn: TextIO | None = STDERR,
    settings: Settings | None = None,
) -> Analysis:
    """Open the sweep (analysis/cells/loaded.py `open_sweep`, with `settings`: the margin of the verdicts,
    the data- and launch-bound shares) and build every study's tables (analysis/studies/registry.py),
    with `reference` ("seminar", "fp8_triton") those judging its claims too."""
    loaded = open_sweep(sweep_dir, settings=settings, warn=warn)
    opened = {part.name: getattr(loaded, part.name) for part in fields(Loaded)}
    analysis = Analysis(**{**opened, "reference": reference}, studies=studies_for(reference))
    analysis.tables = [table for study in analysis.studies for table in study.tables(analysis)]
    return analysis


def render_tables(analysis: Analysis, fmt: str, full: bool = False) -> str:
    """The tables as one text: Markdown or LaTeX, one after another, the per-cell table compact unless
    `full`; CSV and JSON: the per-cell table only, every column (one CSV is one table; report/tables/
    has each table as its own CSV)."""
    if fmt in ONE_TABLE:  # a sweep of GEMM cells only has no per-cell table: its GEMM table then
        return RENDERERS[fmt](next(table for table in analysis.tables if table.name in (SUMMARY, GEMM_TABLE)))
    tables = analysis.tables if full else [table.compact or table for table in analysis.tables]
    return "\n\n".join(RENDERERS[fmt](table) for table in tables) + "\n"


def write_report(analysis: Analysis, with_plots: bool = True) -> Path:
    """Write SWEEP_DIR/report/ (tables, figures, index.md and index.html); returns index.md's path."""
    directory = analysis.sweep_dir / REPORT_DIR
    (directory / TABLES_DIR).mkdir(parents=True, exist_ok=True)
    environment = environment_table(analysis.data.attempts)
    for table in [*analysis.tables, environment]:
        for suffix, render in (("md", markdown), ("tex", latex), ("csv", csv)):
            (directory / TABLES_DIR / f"{table.name}.{suffix}").write_text(render(table).rstrip("\n") + "\n")
    plots = {}
    if with_plots:
        from analysis.rendering.figure_layout import write_figures  # matplotlib: only when plotting

        figures = (figure for study in analysis.studies for figure in study.figures(analysis))
        plots = write_figures(figures, directory / PLOTS_DIR)
    page = Page(
        title=TITLE,
        sweep_dir=analysis.sweep_dir,
        count_line=analysis.count_line(),
        problems=[(problem.message, problem.path) for problem in analysis.data.problems],
        tables=analysis.tables,
        environment=environment,
        plots=plots,
        directory=directory,
        tables_dir=TABLES_DIR,
    )
    index = directory / "index.md"
    index.write_text(markdown_page(page))
    (directory / "index.html").write_text(html_page(page))
    return index
