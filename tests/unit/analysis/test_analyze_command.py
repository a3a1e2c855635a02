"""`compilebench analyze SWEEP_DIR` end to end: formats, the seminar reference, the report page,
partly broken sweeps and the exit codes."""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path

import pandas as pd
import pytest
import yaml

from analysis.cells.metrics import CELL_COLUMNS, cell_metrics
from analysis.reading.axes import SAME_WORKLOAD
from analysis.reading.collect import load_sweep
from orchestrator.cli.main import main
from tests.helpers import REPO_ROOT
from tests.helpers.analysis_sweeps import TRAINING_FIGURES, write_cell, write_seminar_sweep

SWEEP_TITLES = [
    "### Cells",
    "### Cells by status",
    "### Geometric-mean speedup over eager",
    "### Break-even: steps until compiling pays off",
]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["analyze", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_nothing_to_analyse_exits_non_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, str(tmp_path))
    assert code == 1 and out == "" and "no cells in" in err
    assert run(capsys, str(tmp_path / "nope"))[0] == 2
    pending = tmp_path / "cells" / "pending"
    pending.mkdir(parents=True)
    (pending / "config.yaml").write_text(yaml.safe_dump({"model": {"name": "gpt"}, "size": "tiny"}))
    code, out, err = run(capsys, str(tmp_path))
    assert code == 1 and "no results yet" in err and "1 no_result" in err
    assert not (tmp_path / "report").exists()


def test_markdown_tables_and_report_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_seminar_sweep(tmp_path)
    code, out, err = run(capsys, str(tmp_path))
    assert code == 0
    titles = re.findall(r"^### .*$", out, flags=re.M)
    assert titles[:4] == SWEEP_TITLES and len(titles) == 7  # and the three seminar tables
    assert "published" not in out and "claims" not in out
    index = tmp_path / "report" / "index.md"
    assert (
        f"report: {index.with_suffix('.html')} (and index.md)" in err
        and "12 cells: 10 completed, 1 failed, 1 not_compiled" in err
    )
    page = index.read_text()
    links = re.findall(r"\]\(([^)]+)\)", page)
    assert sum(link.endswith(".png") for link in links) == len(TRAINING_FIGURES)
    assert sum(link.endswith(".csv") for link in links) == 7  # no scaling table: every cell ran one process
    for link in links:
        assert (index.parent / link).is_file(), link


#: The compact per-cell table's columns (`analyze` without --full, and what a local sweep prints).
COMPACT = ["cell", "median ms", "speedup [95% CI]", "verdict", "compile s", "break-even steps", "why"]


def cells_table(out: str) -> list[str]:
    """The lines of the per-cell table in `analyze`'s Markdown."""
    lines = out.split("### Cells\n\n", 1)[1].splitlines()
    return lines[: next(i for i, line in enumerate(lines) if not line.startswith("|"))]


def columns(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_the_per_cell_table_fits_a_terminal_and_the_full_one_is_a_flag_away(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The H100 seminar_llm sweep (6 cells) as measured, and a failed cell of one of its workloads."""
    with tarfile.open(REPO_ROOT / "docs/results/h100_2026-11-21/seminar_llm.tar.gz") as tar:
        tar.extractall(tmp_path, [m for m in tar if m.isfile() and "/submitit/" not in m.name], filter="data")
    sweep = tmp_path / "seminar_llm"
    eager = cell_metrics(load_sweep(sweep, warn=None)).query("backend == 'eager'").iloc[0]
    axes = eager[SAME_WORKLOAD].dropna().to_dict()
    write_cell(sweep, "failed", "aot_eager", "failed", error="RuntimeError: CUDA out of memory\n...", **axes)
    code, out, _ = run(capsys, str(sweep), "--no-plots")
    table = cells_table(out)
    assert code == 0 and len(table) == 2 + 7 and max(map(len, table)) <= 160
    assert max(map(len, out.splitlines())) <= 160  # every table and note (notes wrapped at 110)
    assert columns(table[0]) == COMPACT  # no accuracy check ran on these cells: no column for it
    failed = next(columns(line) for line in table if "aot_eager" in line)
    # The error cut to 26 characters: the default margin's `no difference†` (one run) needs the room.
    assert failed[3] == "failed" and failed[-1] == "RuntimeError: CUDA out of…"
    verdicts = {columns(line)[3] for line in table[2:]}
    assert {"faster†", "no difference†"} <= verdicts and "†: from one run" in out  # one run each
    full = cells_table(run(capsys, str(sweep), "--no-plots", "--full")[1])
    assert {"p5–p95 ms", "GPU ms/step", "e2e speedup [95% CI]", "error"} <= set(columns(full[0]))
    assert len(full) == len(table) and max(map(len, full)) > 160
    page = (sweep / "report" / "index.md").read_text()
    assert "\n".join(full) in page and "\n".join(table) not in page  # the report keeps every column
    assert list(pd.read_csv(io.StringIO(run(capsys, str(sweep), "--format", "csv", "--no-plots")[1]))) == (
        CELL_COLUMNS
    )


def test_reference_seminar_and_latex(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_seminar_sweep(tmp_path)
    code, out, _ = run(capsys, str(tmp_path), "--reference", "seminar", "--format", "latex", "--no-plots")
    assert code == 0
    assert out.count(r"\begin{table}") == 4 + 3 + 1  # sweep tables, seminar tables, claims
    assert r"gpt2 published $\mu$" in out and "inductor is slower than eager for resnet18" in out
    assert not (tmp_path / "report" / "plots").exists()
    claims = pd.read_csv(tmp_path / "report" / "tables" / "seminar_claims.csv")
    assert len(claims) == 8 and set(claims["verdict"]) == {"agrees", "disagrees", "inconclusive", "no data"}


def test_csv_is_the_per_cell_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_seminar_sweep(tmp_path)
    code, out, _ = run(capsys, str(tmp_path), "--format", "csv", "--no-plots")
    cells = pd.read_csv(io.StringIO(out))
    assert code == 0 and list(cells.columns) == CELL_COLUMNS and len(cells) == 12
    on_disk = pd.read_csv(tmp_path / "report" / "tables" / "summary.csv")
    pd.testing.assert_frame_equal(cells, on_disk)


def test_a_partly_broken_sweep_is_analysed_as_far_as_it_goes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_cell(tmp_path, "e", "eager", step_ms=[10.0, 10.0])
    write_cell(tmp_path, "i", "inductor", step_ms=[5.0, 5.0])
    broken = write_cell(tmp_path, "b", "aot_eager", step_ms=[5.0]) / "run.parquet"
    broken.write_bytes(broken.read_bytes()[:100])
    code, out, err = run(capsys, str(tmp_path), "--no-plots")
    assert code == 0
    assert str(broken) in err and str(tmp_path / "manifest.parquet") in err
    assert "2.00x" in out and "| unreadable" in out
    page = (tmp_path / "report" / "index.md").read_text()
    assert "## Problems" in page and str(broken) in page


def test_the_help_shows_each_default_read_from_its_home(capsys: pytest.CaptureFixture[str]) -> None:
    """`analyze --help` and `compare --help` quote no numbers of their own: each default is the value
    of the analysis constant it names (orchestrator/cli/args.py `default_home`)."""
    from analysis.cells.device_time import LAUNCH_BOUND
    from analysis.compare import THRESHOLD
    from analysis.statistics.verdicts import DATA_BOUND

    for command, defaults in (("analyze", (DATA_BOUND, LAUNCH_BOUND)), ("compare", (THRESHOLD,))):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert [f"(default: {value:g})" in text for value in defaults] == [True] * len(defaults), text
