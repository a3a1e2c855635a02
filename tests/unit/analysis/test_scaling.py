"""Cells of several processes (DDP): kept apart from one-process cells, and the scaling table with
its figure. The cells are recorded as a distributed cell records them (workloads.cell.recorder merges
the ranks' steps); every golden number below follows by hand from the step times written."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from analysis.cells.metrics import cell_metrics
from analysis.reading.collect import load_sweep
from analysis.rendering.text import csv, latex, markdown
from analysis.report import analyze
from analysis.studies.scaling.figure import scaling_figure
from analysis.studies.scaling.table import SCALING, scaling_table
from analysis.studies.sweep.table import summary_table
from orchestrator.cli.main import main
from tests.helpers.analysis_sweeps import write_cell, write_manifest, write_ranks_cell
from workloads.contract.schema import write_parquet_atomic

#: Step times constant within a rank, so that every bootstrap interval is its point estimate.
#: e1: 110 ms. i1: 88 ms. e2: ranks 125 and 124 ms, a step lasts the slower's 125 ms. i2: 110 and
#: 109 ms -> 110. e4: four ranks on two nodes, 130 ms. b16: batch 16 on two processes only, 200 ms.
SCALING_TABLE = """\
### Scaling over processes

| workload     | backend  | world size | procs/node × nodes | status    | items/step | median ms | items/s | speedup vs 1 process [95% CI] | efficiency [95% CI]   | vs eager [95% CI]  | graph breaks | DDP splits | rank imbalance |
| ------------ | -------- | ---------- | ------------------ | --------- | ---------- | --------- | ------- | ----------------------------- | --------------------- | ------------------ | ------------ | ---------- | -------------- |
| gpt tiny b8  | eager    | 1          | 1 × 1              | completed | 1,000      | 110.0     | 9,091   | 1.00x [1.00, 1.00]            | 100.0% [100.0, 100.0] | 1.00x [1.00, 1.00] |              |            |                |
| gpt tiny b8  | eager    | 2          | 2 × 1              | completed | 2,000      | 125.0     | 16,000  | 1.76x [1.76, 1.76]            | 88.0% [88.0, 88.0]    | 1.00x [1.00, 1.00] |              |            | 0.81%          |
| gpt tiny b8  | eager    | 4          | 2 × 2              | completed | 4,000      | 130.0     | 30,769  | 3.38x [3.38, 3.38]            | 84.6% [84.6, 84.6]    | 1.00x [1.00, 1.00] |              |            | 0.00%          |
| gpt tiny b8  | inductor | 1          | 1 × 1              | completed | 1,000      | 88.00     | 11,364  | 1.00x [1.00, 1.00]            | 100.0% [100.0, 100.0] | 1.25x [1.25, 1.25] | 0            | 0          |                |
| gpt tiny b8  | inductor | 2          | 2 × 1              | completed | 2,000      | 110.0     | 18,182  | 1.60x [1.60, 1.60]            | 80.0% [80.0, 80.0]    | 1.14x [1.14, 1.14] | 3            | 13         | 0.92%          |
| gpt tiny b16 | eager    | 2          | 2 × 1              | completed | 2,000      | 200.0     | 10,000  |                               |                       | 1.00x [1.00, 1.00] |              |            | 0.00%          |"""  # noqa: E501


def write_scaling_sweep(root: Path) -> Path:
    """The cells of SCALING_TABLE, and a workload of one process only (fp32), which has no row."""
    write_ranks_cell(root, "e1", "eager", [[110.0] * 3])
    write_ranks_cell(root, "i1", "inductor", [[88.0] * 3], ddp_graph_splits=0)
    write_ranks_cell(root, "e2", "eager", [[125.0] * 3, [124.0] * 3])
    write_ranks_cell(
        root, "i2", "inductor", [[110.0] * 3, [109.0] * 3], graph_break_count=3, ddp_graph_splits=13
    )
    write_ranks_cell(root, "e4", "eager", [[130.0] * 3] * 4, nodes=2)
    write_ranks_cell(root, "b16", "eager", [[200.0] * 3] * 2, batch_size=16)
    write_ranks_cell(root, "f1", "eager", [[50.0] * 3], precision="fp32")
    write_ranks_cell(root, "g1", "inductor", [[40.0] * 3], precision="fp32")
    return root


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_scaling_sweep(tmp_path_factory.mktemp("scaling"))


@pytest.fixture(scope="module")
def metrics(sweep: Path) -> pd.DataFrame:
    return cell_metrics(load_sweep(sweep, warn=None))


def by_id(metrics: pd.DataFrame) -> dict[str, dict]:
    return {row["cell_id"]: row for row in metrics.to_dict("records")}


def test_cells_that_differ_in_processes_are_not_compared_with_each_other(metrics: pd.DataFrame) -> None:
    rows = by_id(metrics)
    assert rows["i2"]["baseline_cell_id"] == "e2" and rows["i2"]["speedup"] == pytest.approx(125 / 110)
    assert rows["i1"]["baseline_cell_id"] == "e1" and rows["i1"]["speedup"] == pytest.approx(110 / 88)
    assert rows["e2"]["speedup"] == 1.0 and rows["e4"]["baseline_cell_id"] == "e4"
    assert (rows["e4"]["world_size"], rows["e4"]["nodes"], rows["e4"]["dist_backend"]) == (4, 2, "gloo")
    # The per-cell table orders by processes before backends, and shows them.
    assert list(metrics["cell_id"][:6]) == ["e1", "i1", "e2", "i2", "e4", "b16"]
    text = markdown(summary_table(metrics)).splitlines()
    assert "| procs | nodes |" in text[2] and "| 4     | 2     |" in text[8]


def test_scaling_numbers_against_the_one_process_cell(metrics: pd.DataFrame) -> None:
    rows = by_id(metrics)
    # Throughput: global items per step (1,000 per process) over the median step.
    assert rows["e2"]["items_per_s"] == pytest.approx(2000 / 0.125)
    assert rows["e2"]["scaling_speedup"] == pytest.approx((2000 / 0.125) / (1000 / 0.110))  # 1.76
    assert rows["e2"]["scaling_efficiency"] == pytest.approx(0.88)
    assert (
        rows["i2"]["scaling_efficiency"] == pytest.approx(0.80)
        and rows["i2"]["scaling_baseline_cell_id"] == "i1"
    )
    assert rows["e4"]["scaling_speedup"] == pytest.approx(4 * 110 / 130)
    assert rows["e2"]["rank_imbalance"] == pytest.approx(125 / 124 - 1)
    assert (
        rows["i2"]["rank_imbalance"] == pytest.approx(110 / 109 - 1) and rows["i2"]["ddp_graph_splits"] == 13
    )
    assert math.isnan(rows["e1"]["rank_imbalance"])  # one rank: nothing to compare
    assert math.isnan(rows["b16"]["scaling_speedup"]) and pd.isna(rows["b16"]["scaling_baseline_cell_id"])
    assert rows["f1"]["scaling_speedup"] == 1.0  # its own reference, in a series of one process only


def test_scaling_table(sweep: Path, metrics: pd.DataFrame) -> None:
    table = scaling_table(metrics)
    assert markdown(table).split("\n\n")[:2] == SCALING_TABLE.split("\n\n")
    assert table.name in [t.name for t in analyze(sweep, warn=None).tables]
    tex = latex(table)
    assert r"procs/node $\times$ nodes" in tex and r"88.0\% [88.0, 88.0]" in tex
    raw = pd.read_csv(io.StringIO(csv(table))).set_index("cell_id")
    assert list(raw.index) == ["e1", "e2", "e4", "i1", "i2", "b16"]
    assert raw.loc["i2", "scaling_efficiency"] == pytest.approx(0.8) and raw.loc["e4", "nodes"] == 2


def test_no_scaling_table_without_multi_process_cells(tmp_path: Path) -> None:
    write_ranks_cell(tmp_path, "e1", "eager", [[110.0] * 3])
    write_ranks_cell(tmp_path, "i1", "inductor", [[88.0] * 3])
    assert SCALING not in [table.name for table in analyze(tmp_path, warn=None).tables]


def test_the_interval_comes_from_the_steps(tmp_path: Path) -> None:
    """Two processes at 100 ms in 3 of 5 steps and 125 ms in 2, one process at a constant 100 ms.
    A resample's median is 125 when 3 or more of its 5 draws are (probability 0.317), else 100, so
    the 95% interval of the speedup 2 x 100 / median is [2 x 100/125, 2 x 100/100] = [1.6, 2.0]."""
    write_ranks_cell(tmp_path, "one", "eager", [[100.0] * 5])
    write_ranks_cell(
        tmp_path, "two", "eager", [[100.0, 100.0, 100.0, 125.0, 125.0], [99.0, 98.0, 100.0, 120.0, 125.0]]
    )
    row = by_id(cell_metrics(load_sweep(tmp_path, warn=None)))["two"]
    assert row["scaling_speedup"] == pytest.approx(2.0)
    assert (row["scaling_speedup_low"], row["scaling_speedup_high"]) == (
        pytest.approx(1.6),
        pytest.approx(2.0),
    )
    assert (row["scaling_efficiency_low"], row["scaling_efficiency_high"]) == (
        pytest.approx(0.8),
        pytest.approx(1.0),
    )


def test_run_files_of_schema_version_1_are_one_process(tmp_path: Path) -> None:
    """A run.parquet from before distributed cells has no world_size: it ran one process, and is
    the reference for a later two-process cell of the same workload."""
    path = write_cell(tmp_path, "old", "eager", step_ms=[110.0] * 3) / "run.parquet"
    v1 = pq.read_table(path).drop_columns(
        [
            "world_size",
            "nodes",
            "dist_backend",
            "ddp_graph_splits",
            "rank_hostname",
            "rank_median_step_ms",
            "rank_compile_time_s",
            "rank_peak_mem_bytes",
        ]
    )
    write_parquet_atomic(v1, path)
    write_ranks_cell(tmp_path, "new", "eager", [[125.0] * 3, [125.0] * 3])
    write_manifest(tmp_path, [{"cell_id": "queued", "model": "gpt", "size": "tiny", "backend": "eager"}])
    rows = by_id(cell_metrics(load_sweep(tmp_path, warn=None)))
    assert "world_size" not in pq.read_schema(path).names
    assert (rows["old"]["world_size"], rows["old"]["nodes"]) == (1, 1)
    assert rows["new"]["scaling_baseline_cell_id"] == "old" and rows["new"][
        "scaling_efficiency"
    ] == pytest.approx(0.88)
    assert pd.isna(rows["queued"]["world_size"])  # listed in the manifest only: not known


def test_cells_without_a_result_take_their_processes_from_the_config(tmp_path: Path) -> None:
    for name, distributed in (("single", None), ("ddp", {"nodes": 2, "tasks_per_node": 4})):
        config = {"model": {"name": "gpt"}, "size": "tiny", "backend": {"name": "eager"}}
        (tmp_path / "cells" / name).mkdir(parents=True)
        (tmp_path / "cells" / name / "config.yaml").write_text(
            yaml.safe_dump({**config, "distributed": distributed})
        )
    rows = by_id(cell_metrics(load_sweep(tmp_path, warn=None)))
    assert (rows["single"]["world_size"], rows["single"]["nodes"]) == (1, 1)
    assert (rows["ddp"]["world_size"], rows["ddp"]["nodes"]) == (8, 2)


def test_scaling_figure_shows_the_efficiencies_and_speedups(metrics: pd.DataFrame) -> None:
    efficiency_ax, eager_ax = scaling_figure(metrics, pd.DataFrame()).axes
    series = lambda ax: [list(line.get_ydata()) for line in ax.lines if line.get_linestyle() == "-"]  # noqa: E731
    eager_b8, inductor_b8, eager_b16 = series(
        efficiency_ax
    )  # (the dashed line is 100%, the caps have no line)
    assert eager_b8 == pytest.approx([100.0, 88.0, 100 * 110 / 130]) and inductor_b8 == pytest.approx(
        [100.0, 80.0]
    )
    assert len(eager_b16) == 1 and math.isnan(eager_b16[0])  # no 1-process cell to scale from
    assert series(eager_ax) == [pytest.approx([110 / 88, 125 / 110])]  # compiled series only


def test_analyze_prints_and_reports_the_scaling_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_scaling_sweep(tmp_path)
    assert main(["analyze", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert SCALING_TABLE in out
    page = (tmp_path / "report" / "index.md").read_text()
    assert SCALING_TABLE in page and "(plots/scaling.png)" in page
    for suffix in ("md", "tex", "csv"):
        assert (tmp_path / "report" / "tables" / f"{SCALING}.{suffix}").is_file()
