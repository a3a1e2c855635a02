"""`compilebench analyze`: from a sweep directory to tables (stdout) and a report page.

The report lies in SWEEP_DIR/report/: `index.md` (every table, the problems found, the figures,
the environment), the same as one self-contained page `index.html` (analysis/html.py),
`tables/<name>.{md,tex,csv}` and `plots/<name>.{png,svg}`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import pandas as pd

from analysis.auto_repeats import auto_repeats_table, recorded_equivalence
from analysis.busy import LAUNCH_BOUND
from analysis.claims import claims_table
from analysis.collect import SweepData, load_sweep
from analysis.energy import energy_tables
from analysis.environment import environment_table
from analysis.fp8 import fp8_table
from analysis.gemm import GEMM_TABLE, gemm_cells, gemm_mask, gemm_table
from analysis.gemm_claims import claims_table as fp8_triton_claims
from analysis.html import html_page
from analysis.metrics import cell_metrics
from analysis.reasons import reasons_table
from analysis.render import ONE_TABLE, RENDERERS, Table, csv, latex, markdown
from analysis.seminar import seminar_tables
from analysis.suite import suite_name, suite_tables
from analysis.tables import SUMMARY, ordered_statuses, sweep_tables
from analysis.verdicts import DATA_BOUND, EQUIVALENCE
from workloads.contract.sweep_dir import REPORT_DIR, STDERR
from workloads.contract.vocabulary import NO_RESULT, UNREADABLE

TABLES_DIR = "tables"
PLOTS_DIR = "plots"


@dataclass
class Analysis:
    """A sweep read and analysed: its data, one metrics row per cell, and its tables."""

    sweep_dir: Path
    data: SweepData
    metrics: pd.DataFrame
    tables: list[Table]
    gemm: pd.DataFrame = field(default_factory=pd.DataFrame)
    """The GEMM cells' rows (analysis/gemm.py), empty without any."""

    @property
    def has_results(self) -> bool:
        """Whether any cell has a readable result (of any status)."""
        return bool((~self.metrics["status"].isin([NO_RESULT, UNREADABLE])).any())

    def count_line(self) -> str:
        """`12 cells: 9 completed, 2 failed, 1 no_result`."""
        counts = Counter(self.metrics["status"])
        return f"{len(self.metrics)} cells: " + ", ".join(
            f"{counts[s]} {s}" for s in ordered_statuses(counts)
        )


def analyze(
    sweep_dir: Path,
    reference: str | None = None,
    warn: TextIO | None = STDERR,
    equivalence: float | None = None,
    data_bound: float = DATA_BOUND,
    launch_bound: float = LAUNCH_BOUND,
) -> Analysis:
    """Read the sweep and build its tables: the sweep's own, why graphs broke or recompiled (where
    any run recorded a reason), the suite tables of a suite (`+suite=...`, analysis/suite.py), the
    seminar layouts it has cells for, fp8 against bf16 (analysis/fp8.py) where fp8 training cells have
    a bf16 counterpart, why each cell stopped where repeats=auto ran it (analysis/auto_repeats.py), the
    GEMM table (analysis/gemm.py) where it has GEMM cells, and with `reference="seminar"` every seminar
    table beside the published values and the claims, with `reference="fp8_triton"` the FP8 GEMM
    post's claims judged (analysis/gemm_claims.py).
    GEMM cells time one matrix multiply, not a training step: the training tables leave them out.
    `equivalence`: the margin of practical equivalence of the verdicts (0: none; None: the margin the
    sweep's repeats=auto cells were decided with, analysis/auto_repeats.py, else 0); `data_bound`: the
    share of step time waiting for data above which a cell's verdict rests on end-to-end throughput;
    `launch_bound`: the GPU's idle share above which a cell is launch-bound."""
    data = load_sweep(Path(sweep_dir), warn)
    if equivalence is None:
        equivalence = recorded_equivalence(Path(sweep_dir), data.cells["cell_id"]) or EQUIVALENCE
    metrics = cell_metrics(data, equivalence=equivalence, data_bound=data_bound, launch_bound=launch_bound)
    reasons = reasons_table(data.cells, metrics)
    suite = suite_name(Path(sweep_dir))
    training = metrics[~gemm_mask(metrics)]
    gemm = gemm_cells(data, metrics)
    fp8 = fp8_table(data, training, equivalence)
    auto = auto_repeats_table(Path(sweep_dir), metrics)
    tables = [
        *(
            sweep_tables(training, equivalence, data_bound, launch_bound)
            if gemm.empty or len(training)
            else []
        ),
        *energy_tables(training),
        *([auto] if auto else []),
        *([fp8] if fp8 else []),
        *([reasons] if reasons else []),
        *(suite_tables(training, data.steps, suite) if suite else []),
        *seminar_tables(training, with_reference=reference == "seminar"),
        *([gemm_table(gemm)] if len(gemm) else []),
    ]
    if reference == "seminar":
        tables.append(claims_table(training, margin=equivalence))
    elif reference == "fp8_triton":
        tables.append(fp8_triton_claims(gemm))
    return Analysis(Path(sweep_dir), data, metrics, tables, gemm)


def render_tables(analysis: Analysis, fmt: str, full: bool = False) -> str:
    """The tables as one text: Markdown or LaTeX, one after another, the per-cell table compact unless
    `full`; CSV and JSON: the per-cell table only, every column (one CSV is one table; report/tables/
    has each table as its own CSV)."""
    if fmt in ONE_TABLE:  # a sweep of GEMM cells only has no per-cell table: its GEMM table then
        return RENDERERS[fmt](next(table for table in analysis.tables if table.name in (SUMMARY, GEMM_TABLE)))
    tables = analysis.tables if full else [table.compact or table for table in analysis.tables]
    return "\n\n".join(RENDERERS[fmt](table) for table in tables) + "\n"


TITLE = "compilebench report"


def _index(analysis: Analysis, environment: Table, plots: dict[str, list[Path]], directory: Path) -> str:
    lines = [f"# {TITLE}", "", f"Sweep `{analysis.sweep_dir}`: {analysis.count_line()}.", ""]
    if analysis.data.problems:
        lines += ["## Problems", "", *(f"- {p.message}: `{p.path}`" for p in analysis.data.problems), ""]
    lines += ["## Tables", ""]
    for table in analysis.tables:
        files = ", ".join(f"[{fmt}]({TABLES_DIR}/{table.name}.{fmt})" for fmt in ("csv", "tex"))
        lines += [markdown(table), "", f"As {files}.", ""]
    if plots:
        lines += ["## Figures", ""]
        for name, paths in plots.items():
            png, svg = (path.relative_to(directory).as_posix() for path in paths)
            lines += [f"![{name}]({png})", "", f"([SVG]({svg}))", ""]
    if environment.text.size:
        lines += ["## Environment", "", markdown(environment), ""]
    return "\n".join(lines)


def write_report(analysis: Analysis, with_plots: bool = True) -> Path:
    """Write SWEEP_DIR/report/ (tables, figures, index.md and index.html); returns index.md's path."""
    directory = analysis.sweep_dir / REPORT_DIR
    (directory / TABLES_DIR).mkdir(parents=True, exist_ok=True)
    environment = environment_table(analysis.sweep_dir)
    for table in [*analysis.tables, environment]:
        for suffix, render in (("md", markdown), ("tex", latex), ("csv", csv)):
            (directory / TABLES_DIR / f"{table.name}.{suffix}").write_text(render(table).rstrip("\n") + "\n")
    plots = {}
    if with_plots:
        from analysis.energy_plot import write_energy_plot
        from analysis.gemm_plot import write_gemm_plot
        from analysis.plots import write_plots  # matplotlib costs a second to import: only when plotting

        training = analysis.metrics[~gemm_mask(analysis.metrics)]
        if len(training):
            plots = write_plots(training, analysis.data.steps, directory / PLOTS_DIR)
            plots.update(write_energy_plot(training, analysis.data.steps, directory / PLOTS_DIR))
        plots.update(write_gemm_plot(analysis.gemm, directory / PLOTS_DIR))
    index = directory / "index.md"
    index.write_text(_index(analysis, environment, plots, directory))
    summary = f"Sweep {analysis.sweep_dir}: {analysis.count_line()}."
    (directory / "index.html").write_text(
        html_page(
            TITLE, summary, analysis.data.problems, analysis.tables, environment, plots, directory, TABLES_DIR
        )
    )
    return index
