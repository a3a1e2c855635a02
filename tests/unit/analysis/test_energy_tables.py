"""Energy in `compilebench analyze` (analysis/cells/energy.py, analysis/cells/cost.py,
analysis/studies/energy/): joules per step, items per joule, the energy ratio and the break-even in
joules against hand computation, intervals that hold what they should, what each verdict cost, the
figure; and sweeps without energy columns (older files, CPU cells) analysed and reported as before.
Sweeps are written through the project's writers (tests/helpers/analysis_sweeps.py)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from PIL import Image

from analysis.cells.metrics import cell_metrics
from analysis.reading.collect import load_sweep
from analysis.report import analyze, render_tables, write_report
from analysis.studies.energy.figure import energy_figure
from analysis.studies.suite import suite_tables
from analysis.studies.sweep.table import summary_table
from tests.helpers.analysis_sweeps import (
    GPT2,
    metrics_of,
    write_cell,
    write_paired_replicates,
    write_replicates,
    write_seminar_sweep,
)

#: Three measured steps per replicate: energy comes from the run rows, time from these.
STEPS = [[10.0, 10.0, 10.0], [10.5, 10.5, 10.5], [11.0, 11.0, 11.0]]
T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)


def held(start_s: float, seconds: float) -> dict[str, datetime]:
    """An attempt's started_at and finished_at, `seconds` apart."""
    return {
        "started_at": T0 + timedelta(seconds=start_s),
        "finished_at": T0 + timedelta(seconds=start_s + seconds),
    }


def energy(joules_per_step: float, **more: float) -> dict[str, float]:
    return {"joules_per_step": joules_per_step, **more}


def write_unpaired(sweep: Path) -> None:
    """Eager 11 J/step (runs 10, 11, 12), inductor 8.5 (8, 8.5, 9) with a 700 J compile, aot_eager
    12 J/step (uses more), torchscript one run of 9 J/step: GPT-2 on an H100, three runs each but
    torchscript."""
    runs = [energy(j, avg_power_w=w) for j, w in zip((10.0, 11.0, 12.0), (300.0, 320.0, 310.0))]
    write_replicates_with(sweep, "e", "eager", runs, **GPT2)
    compiled = dict(compile_energy_j=700.0, **GPT2)
    write_replicates_with(sweep, "i", "inductor", [energy(j) for j in (8.0, 8.5, 9.0)], **compiled)
    write_replicates_with(sweep, "a", "aot_eager", [energy(12.0)] * 3, **compiled)
    write_cell(sweep, "t", "torchscript", step_ms=STEPS[0], joules_per_step=9.0, **compiled)


def write_replicates_with(sweep: Path, cell: str, backend: str, runs: list[dict], **run) -> None:
    """A cell of len(runs) replicates of STEPS' times, replicate r's run row with runs[r]."""
    write_replicates(sweep, cell, backend, STEPS[: len(runs)], replicate_run=runs, **run)


def test_unpaired_energy_ratio_and_break_even_by_hand(tmp_path: Path) -> None:
    write_unpaired(tmp_path)
    rows = metrics_of(tmp_path)
    eager, inductor = rows["e"], rows["i"]
    logs = np.log([10.0, 11.0, 12.0])
    e, i = np.exp(logs.mean()), np.exp(np.log([8.0, 8.5, 9.0]).mean())  # geometric means over runs
    assert (eager["joules_per_step"], inductor["joules_per_step"]) == (pytest.approx(e), pytest.approx(i))
    assert inductor["items_per_joule"] == pytest.approx(1000 / i)
    assert eager["avg_power_w"] == 310.0
    assert inductor["energy_ratio"] == pytest.approx(e / i) and inductor["energy_method"] == "unpaired"
    # 700 J / (e - i) J saved per step, in which eager spends e J a step.
    assert inductor["energy_pays_off"] is True
    assert inductor["energy_break_even_steps"] == pytest.approx(700 / (e - i))
    assert inductor["energy_break_even_j"] == pytest.approx(700 / (e - i) * e)
    slower = rows["a"]
    assert slower["energy_ratio"] == pytest.approx(e / 12) and slower["energy_pays_off"] is False
    assert np.isnan(slower["energy_break_even_steps"])
    # Intervals over three runs: Student-t on the logs (textbook t_{2, 0.975} = 4.303), Welch's ratio.
    half = 4.303 * logs.std(ddof=1) / np.sqrt(3)
    assert eager["joules_per_step_low"] == pytest.approx(np.exp(logs.mean() - half), rel=1e-4)
    assert eager["joules_per_step_high"] == pytest.approx(np.exp(logs.mean() + half), rel=1e-4)
    assert inductor["energy_ratio_low"] < e / i < inductor["energy_ratio_high"]
    assert inductor["items_per_joule_low"] == pytest.approx(1000 / inductor["joules_per_step_high"])
    # One run is one value: no interval, of its J/step nor of its ratio.
    one = rows["t"]
    assert one["energy_ratio"] == pytest.approx(e / 9)
    assert np.isnan([one["joules_per_step_low"], one["energy_ratio_low"], one["energy_ratio_high"]]).all()
    # The eager cell against itself.
    assert (eager["energy_ratio"], eager["energy_ratio_low"], eager["energy_ratio_high"]) == (1.0, 1.0, 1.0)
    assert pd.isna(eager["energy_method"]) and pd.isna(eager["energy_pays_off"])


def test_the_energy_tables(tmp_path: Path) -> None:
    write_unpaired(tmp_path)
    tables = {table.name: table for table in analyze(tmp_path, warn=None).tables}
    text = tables["energy"].text.set_index("cell")
    # Geometric means over runs: 8.490 J/step (8, 8.5, 9) against eager's 10.970 (10, 11, 12).
    assert text.at["i", "J/step [95% CI]"].startswith("8.49 [")
    assert text.at["i", "items/J [95% CI]"].startswith("117.8 [")
    assert text.at["i", "energy ratio [95% CI]"].startswith("1.29x [")
    assert (text.at["i", "vs eager"], text.at["i", "compile kJ"]) == ("unpaired", "0.7")
    assert (text.at["i", "break-even steps"], text.at["i", "break-even kJ"]) == ("282", "3.10")
    assert (text.at["a", "break-even steps"], text.at["a", "break-even kJ"]) == ("never", "never")
    assert (text.at["t", "J/step [95% CI]"], text.at["e", "avg W"]) == ("9.00", "310.0")
    backends = tables["energy_backends"].data.set_index("backend")
    assert backends.at["inductor", "geomean_energy_ratio"] == pytest.approx(10.9696 / 8.4902, rel=1e-4)
    assert backends.at["inductor", "saves_energy"] == 1 and backends.at["aot_eager", "costs_energy"] == 0
    assert "energy ratio" in render_tables(analyze(tmp_path, warn=None), "markdown")


def test_compile_energy_is_a_cold_compiles_and_a_warm_one_says_so(tmp_path: Path) -> None:
    """Inductor's first replicate compiled cold (its FX graph and AOTAutograd lookups all missed,
    3.1 kJ), the two after it from its cache (0.4 kJ): break-even in joules rests on the cold one,
    although the replicate that speaks for the cell is warm. A second inductor cell (seed 2) found
    the first's entries in every run: its warm compile is all there is, and the table says so."""
    write_replicates_with(tmp_path, "e", "eager", [energy(j) for j in (10.0, 11.0, 12.0)], **GPT2)
    cold = dict(compile_energy_j=3100.0, fx_graph_cache_hits=0, fx_graph_cache_misses=4)
    warm = dict(compile_energy_j=400.0, fx_graph_cache_hits=4, aot_autograd_cache_hits=2)
    runs = [energy(8.5, **cold), energy(8.5, **warm), energy(8.5, **warm)]
    write_replicates_with(tmp_path, "i", "inductor", runs, **GPT2)
    write_replicates_with(tmp_path, "e2", "eager", [energy(11.0)] * 3, **{**GPT2, "seed": 2})
    write_replicates_with(tmp_path, "w", "inductor", [energy(8.5, **warm)] * 3, **{**GPT2, "seed": 2})
    rows = metrics_of(tmp_path)
    assert rows["i"]["compile_energy_j"] == 3100.0 and rows["i"]["compile_energy_warm"] is False
    # Eager's J/step is the geometric mean over its runs: (10 x 11 x 12)^(1/3) = 10.970.
    assert rows["i"]["energy_break_even_steps"] == pytest.approx(3100 / ((10 * 11 * 12) ** (1 / 3) - 8.5))
    assert rows["w"]["compile_energy_j"] == 400.0 and rows["w"]["compile_energy_warm"] is True
    tables = {table.name: table for table in analyze(tmp_path, warn=None).tables}
    text = tables["energy"].text.set_index("cell")
    assert text.loc["i", ["compile kJ", "break-even steps"]].tolist() == ["3.10", "1,255"]
    assert text.loc["w", ["compile kJ", "break-even steps"]].tolist() == ["0.4 (warm)", "160 (warm)"]


def test_a_short_window_and_an_unsettled_board_are_flagged(tmp_path: Path) -> None:
    """Eager's windows lasted 0.6 s on a counter that updated every 0.1 s: 6 updates, short; the
    inductor cell's 5 s without a recorded period (an older run: 0.1 s assumed) are not, but its
    energy ratio rests on eager's short ones. Both are shown, marked, and left out of the
    per-backend table, which keeps the workload (seed 2) whose eager windows were long. One eager
    run's board had not settled before it: its idle power says so."""
    short = [
        energy(j, energy_window_s=0.6, energy_update_s=0.1, idle_power_w=70.0) for j in (10.0, 11.0, 12.0)
    ]
    short[1]["idle_settled"] = False
    write_replicates_with(tmp_path, "e", "eager", short, **GPT2)
    runs = [energy(8.5, energy_window_s=5.0, idle_power_w=70.0, idle_settled=True)] * 3
    write_replicates_with(tmp_path, "i", "inductor", runs, **GPT2)
    long = [energy(11.0, energy_window_s=5.0, energy_update_s=0.1)] * 3
    write_replicates_with(tmp_path, "e2", "eager", long, **{**GPT2, "seed": 2})
    write_replicates_with(
        tmp_path, "i2", "inductor", [energy(10.0, energy_window_s=5.0)] * 3, **{**GPT2, "seed": 2}
    )
    rows = metrics_of(tmp_path)
    assert rows["e"]["energy_window_updates"] == pytest.approx(6) and rows["e"]["energy_short_window"]
    assert rows["i"]["energy_window_updates"] == pytest.approx(50) and rows["i"]["energy_short_window"]
    assert not rows["i2"]["energy_short_window"] and not rows["e2"]["energy_short_window"]
    assert rows["e"]["idle_settled"] is False and rows["i"]["idle_settled"] is True
    assert rows["e2"]["idle_settled"] is None  # not recorded
    tables = {table.name: table for table in analyze(tmp_path, warn=None).tables}
    text = tables["energy"].text.set_index("cell")
    assert text.at["e", "J/step [95% CI]"].endswith(" (short: 6 updates)")
    assert (
        text.at["i", "J/step [95% CI]"].startswith("8.50") and "short" not in text.at["i", "J/step [95% CI]"]
    )
    assert text.at["i", "energy ratio [95% CI]"].endswith(" (short window)")
    assert "short" not in text.at["i2", "energy ratio [95% CI]"]
    assert (text.at["e", "idle W"], text.at["i", "idle W"]) == ("70.00 (not settled)", "70.00")
    backends = tables["energy_backends"].data.set_index("backend")
    assert backends.at["inductor", "cells"] == 1
    assert backends.at["inductor", "geomean_energy_ratio"] == pytest.approx(11 / 10)


def test_paired_energy_from_the_blocks_by_hand(tmp_path: Path) -> None:
    """A paired cell's J/step and ratio come from its blocks' energies, as its speedup from their
    times: a pair without its eager block is left out, and the eager cell's energy does not enter."""
    times = ([10.0, 10.0], [5.0, 5.0])
    blocks = [[times] * 4, [times] * 2]
    joules = [
        [(20.0, 10.0), (22.0, 11.0), (21.0, 14.0), (99.0, 1.0)],  # ratios 2, 2, 1.5 (the last: no eager)
        [(30.0, 12.0), (33.0, 11.0)],  # ratios 2.5, 3
    ]
    blocks[0][3] = ([], [5.0, 5.0])
    edges = [{"energy_edge_share": share} for share in (0.004, 0.006)]  # each run's compiled blocks'
    write_paired_replicates(
        tmp_path, "p", "inductor", blocks, block_j_per_step=joules, replicate_run=edges,
        compile_energy_j=500.0, **GPT2,
    )  # fmt: skip
    write_replicates_with(tmp_path, "e", "eager", [energy(100.0), energy(100.0)], **GPT2)
    data = load_sweep(tmp_path, warn=None)
    pairs = data.pairs.sort_values(["repeat", "pair"])
    assert pairs["compiled_j_per_step"].tolist() == [10.0, 11.0, 14.0, 12.0, 11.0]
    row = cell_metrics(data).set_index("cell_id").loc["p"]
    logs = np.log([2.0, 2.75])  # the replicates' median ratios; their J/step 11 and 11.5
    ratio, jps = np.exp(logs.mean()), np.exp(np.log([11.0, 11.5]).mean())
    assert (row["energy_ratio"], row["joules_per_step"]) == (pytest.approx(ratio), pytest.approx(jps))
    assert row["energy_method"] == "paired"
    half = 12.706 * logs.std(ddof=1) / np.sqrt(2)  # two runs: t_{1, 0.975} = 12.706 (textbook)
    assert row["energy_ratio_low"] == pytest.approx(np.exp(logs.mean() - half), rel=1e-4)
    eager_jps = jps * ratio
    assert row["energy_break_even_steps"] == pytest.approx(500 / (eager_jps - jps))
    assert row["energy_break_even_j"] == pytest.approx(500 / (eager_jps - jps) * eager_jps)
    # the edges' bound: the median over runs of the compiled blocks' time between their steps
    assert row["energy_edge_bias"] == pytest.approx(0.005)
    text = {table.name: table for table in analyze(tmp_path, warn=None).tables}["energy"].text.set_index(
        "cell"
    )
    assert text.at["p", "energy ratio [95% CI]"].endswith(" (edges ≤ 0.5%)")
    assert "edges" not in text.at["e", "energy ratio [95% CI]"]


def test_paired_intervals_hold_the_true_ratio(tmp_path: Path) -> None:
    """40 paired cells of 5 runs whose blocks' J/step scatter 5% (lognormal) around 20 J eager and
    12.5 J compiled: the 95% intervals of the ratio (1.6) and of the J/step hold them for nearly all."""
    rng = np.random.default_rng(7)
    times = ([10.0] * 3, [6.0] * 3)
    for cell in range(40):
        joules = [[tuple(rng.lognormal(np.log([20.0, 12.5]), 0.05)) for _ in range(6)] for _ in range(5)]
        write_paired_replicates(tmp_path, f"p{cell}", "inductor", [[times] * 6] * 5, block_j_per_step=joules,
                                **GPT2)  # fmt: skip
    metrics = cell_metrics(load_sweep(tmp_path, warn=None))
    ratio_held = (metrics["energy_ratio_low"] <= 1.6) & (1.6 <= metrics["energy_ratio_high"])
    jps_held = (metrics["joules_per_step_low"] <= 12.5) & (12.5 <= metrics["joules_per_step_high"])
    assert ratio_held.sum() >= 34 and jps_held.sum() >= 34  # 95% intervals: 38 of 40 expected
    assert ((metrics["energy_ratio_high"] - metrics["energy_ratio_low"]) < 0.3).all()  # and not vacuous


def write_costs(sweep: Path) -> None:
    """Two processes of GPT-2: eager (a failed attempt of 30 s, then 100 s), inductor (two runs of
    200 s); one process: eager (50 s), paired inductor (150 s); and a CPU pair of cells."""
    two = dict(GPT2, world_size=2)
    write_cell(sweep, "e", "eager", status="failed", step_ms=None, attempt=1, repeat=0, **held(0, 30), **two)
    write_cell(sweep, "e", "eager", step_ms=STEPS[0], attempt=2, repeat=0, energy_j=5000.0,
               warmup_energy_j=400.0, joules_per_step=10.0, **held(100, 100), **two)  # fmt: skip
    write_replicates_with(sweep, "i", "inductor", [
        {**held(300 + 300 * r, 200), "energy_j": 8000.0, "warmup_energy_j": 2000.0,
         "compile_energy_j": 1500.0} for r in range(2)
    ], **two)  # fmt: skip
    write_cell(sweep, "e1", "eager", step_ms=STEPS[0], energy_j=2000.0, **held(0, 50), **GPT2)
    write_paired_replicates(sweep, "p", "inductor", [[([10.0] * 3, [8.0] * 3)] * 3],
                            replicate_run=[{**held(60, 150), "energy_j": 6000.0, "warmup_energy_j": 1200.0}],
                            **GPT2)  # fmt: skip
    write_cell(sweep, "ce", "eager", step_ms=STEPS[0], **held(0, 10))
    write_cell(sweep, "ci", "inductor", step_ms=STEPS[1], **held(20, 10))


def test_what_each_verdict_cost_by_hand(tmp_path: Path) -> None:
    write_costs(tmp_path)
    rows = metrics_of(tmp_path)
    # Every attempt, failed ones too, times the processes: (30 + 100) s x 2 GPUs.
    assert (rows["e"]["spent_gpu_s"], rows["e"]["spent_j"]) == (260.0, 5400.0)
    assert np.isnan(rows["e"]["cost_gpu_s"])  # the eager cell has no verdict
    # Unpaired: its own runs (2 x 200 s x 2 GPUs; 2 x (8000 + 2000) J: measuring, and warming up with
    # the compile's 1500 J in it) and the eager cell's.
    assert rows["i"]["verdict"] is not None
    assert (rows["i"]["cost_gpu_s"], rows["i"]["cost_j"]) == (800.0 + 260.0, 20000.0 + 5400.0)
    # Paired on the median step: its eager side ran in its own process, the eager cell is not needed.
    assert rows["p"]["speedup_method"] == "paired"
    assert (rows["p"]["cost_gpu_s"], rows["p"]["cost_j"]) == (150.0, 7200.0)
    # A CPU cell holds no GPU, and measured no energy.
    assert np.isnan([rows["ci"]["cost_gpu_s"], rows["ci"]["cost_j"]]).all() and rows["ci"]["verdict"]
    text = summary_table(pd.DataFrame(list(rows.values()))).text.set_index("cell")
    assert (text.at["i", "cost GPU-min"], text.at["i", "cost kJ"]) == (f"{1060 / 60:.2f}", "25.40")
    assert text.at["e", "cost GPU-min"] == ""
    suite = suite_tables(
        cell_metrics(load_sweep(tmp_path, warn=None)), load_sweep(tmp_path, warn=None).steps, "t"
    )
    per_backend = suite[0].data.set_index("backend")
    # The suite row of a backend: each of its models' compiled cell and eager cell, paired or not.
    assert per_backend.at["inductor", "cost_gpu_h"] == pytest.approx((1060 + 150 + 50) / 3600)
    assert per_backend.at["inductor", "cost_kj"] == pytest.approx((25400 + 7200 + 2000) / 1e3)


def strip_energy(sweep: Path) -> None:
    """Rewrite every Parquet file of the sweep without the energy columns (as written before them)."""
    for path in (sweep / "cells").glob("*/*.parquet"):
        table = pq.read_table(path)
        keep = [
            n for n in table.column_names if "energy" not in n and "joule" not in n and "power_w" not in n
        ]
        pq.write_table(table.select(keep), path)


def test_without_energy_every_table_and_the_report_render(tmp_path: Path) -> None:
    sweep = write_seminar_sweep(tmp_path)
    strip_energy(sweep)
    analysis = analyze(sweep, warn=None)
    assert not {"energy", "energy_backends"} & {table.name for table in analysis.tables}
    assert analysis.metrics["joules_per_step"].isna().all() and analysis.metrics["cost_j"].isna().all()
    summary = next(table for table in analysis.tables if table.name == "summary")
    assert "cost GPU-min" in summary.text and "cost kJ" not in summary.text
    assert summary.text.set_index("cell").at["gpt2-inductor", "cost GPU-min"] == ""  # no start or finish
    records = json.loads(render_tables(analysis, "json"))
    assert all(record["joules_per_step"] is None for record in records)
    for fmt in ("markdown", "latex", "csv"):
        assert render_tables(analysis, fmt)
    index = write_report(analysis, with_plots=True)
    assert not (index.parent / "plots" / "energy.png").exists()
    assert "plots/energy.png" not in index.read_text() and "Energy per step" not in index.read_text()
    assert "figure-energy" not in (index.parent / "index.html").read_text()


def test_the_energy_figure(tmp_path: Path) -> None:
    write_unpaired(tmp_path)
    analysis = analyze(tmp_path, warn=None)
    index = write_report(analysis, with_plots=True)
    png, svg = index.parent / "plots" / "energy.png", index.parent / "plots" / "energy.svg"
    with Image.open(png) as image:
        assert image.format == "PNG" and np.asarray(image.convert("L")).min() < 128
    assert svg.read_text().startswith("<?xml")
    assert "plots/energy.png" in index.read_text()
    assert 'id="figure-energy"' in (index.parent / "index.html").read_text()
    # Each backend's points are its cells' (median step, J/step).
    metrics = analysis.metrics.set_index("cell_id")
    ax = energy_figure(analysis.metrics, analysis.data.steps).axes[0]
    points = [line for line in ax.lines if line.get_marker() == "o"]
    drawn = sorted((float(x), float(y)) for line in points for x, y in zip(*line.get_data()))
    assert len(points) == 4  # a backend each
    assert drawn == sorted(zip(metrics["median_step_ms"], metrics["joules_per_step"]))
