"""Energy in `compilebench analyze` (analysis/energy.py): joules per step, items per joule, the
energy ratio and the break-even in joules against hand computation, intervals that hold what they
should; and sweeps without energy columns (older files, CPU cells) analysed and reported as before.
Sweeps are written through the project's writers (tests/analysis_sweeps.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from analysis.collect import load_sweep
from analysis.metrics import cell_metrics
from analysis.report import analyze, render_tables, write_report
from tests.analysis_sweeps import (
    GPT2,
    metrics_of,
    write_cell,
    write_paired_replicates,
    write_replicates,
    write_seminar_sweep,
)

#: Three measured steps per replicate: energy comes from the run rows, time from these.
STEPS = [[10.0, 10.0, 10.0], [10.5, 10.5, 10.5], [11.0, 11.0, 11.0]]


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
    assert eager["joules_per_step"] == 11.0 and inductor["joules_per_step"] == 8.5  # medians over runs
    assert inductor["items_per_joule"] == pytest.approx(1000 / 8.5)
    assert eager["avg_power_w"] == 310.0
    assert inductor["energy_ratio"] == pytest.approx(11 / 8.5) and inductor["energy_method"] == "unpaired"
    # 700 J / (11 - 8.5) J saved per step = 280 steps, in which eager spends 280 x 11 J.
    assert inductor["energy_pays_off"] is True
    assert inductor["energy_break_even_steps"] == pytest.approx(280)
    assert inductor["energy_break_even_j"] == pytest.approx(3080)
    slower = rows["a"]
    assert slower["energy_ratio"] == pytest.approx(11 / 12) and slower["energy_pays_off"] is False
    assert np.isnan(slower["energy_break_even_steps"])
    # Intervals over three runs: within the runs' range, holding the median.
    assert 10 <= eager["joules_per_step_low"] <= 11 <= eager["joules_per_step_high"] <= 12
    assert 10 / 9 <= inductor["energy_ratio_low"] <= 11 / 8.5 <= inductor["energy_ratio_high"] <= 12 / 8
    assert inductor["items_per_joule_low"] == pytest.approx(1000 / inductor["joules_per_step_high"])
    # One run is one value: no interval, of its J/step nor of its ratio.
    one = rows["t"]
    assert one["energy_ratio"] == pytest.approx(11 / 9)
    assert np.isnan([one["joules_per_step_low"], one["energy_ratio_low"], one["energy_ratio_high"]]).all()
    # The eager cell against itself.
    assert (eager["energy_ratio"], eager["energy_ratio_low"], eager["energy_ratio_high"]) == (1.0, 1.0, 1.0)
    assert pd.isna(eager["energy_method"]) and pd.isna(eager["energy_pays_off"])


def test_the_energy_tables(tmp_path: Path) -> None:
    write_unpaired(tmp_path)
    tables = {table.name: table for table in analyze(tmp_path, warn=None).tables}
    text = tables["energy"].text.set_index("cell")
    assert text.at["i", "J/step [95% CI]"].startswith("8.50 [")
    assert text.at["i", "items/J [95% CI]"].startswith("117.6 [")
    assert text.at["i", "energy ratio [95% CI]"].startswith("1.29x [")
    assert (text.at["i", "vs eager"], text.at["i", "compile kJ"]) == ("unpaired", "0.7")
    assert (text.at["i", "break-even steps"], text.at["i", "break-even kJ"]) == ("280", "3.08")
    assert (text.at["a", "break-even steps"], text.at["a", "break-even kJ"]) == ("never", "never")
    assert (text.at["t", "J/step [95% CI]"], text.at["e", "avg W"]) == ("9.00", "310.0")
    backends = tables["energy_backends"].data.set_index("backend")
    assert backends.at["inductor", "geomean_energy_ratio"] == pytest.approx(11 / 8.5)
    assert backends.at["inductor", "saves_energy"] == 1 and backends.at["aot_eager", "costs_energy"] == 0
    assert "energy ratio" in render_tables(analyze(tmp_path, warn=None), "markdown")


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
    write_paired_replicates(
        tmp_path, "p", "inductor", blocks, block_j_per_step=joules, compile_energy_j=500.0, **GPT2
    )
    write_replicates_with(tmp_path, "e", "eager", [energy(100.0), energy(100.0)], **GPT2)
    data = load_sweep(tmp_path, warn=None)
    pairs = data.pairs.sort_values(["repeat", "pair"])
    assert pairs["compiled_j_per_step"].tolist() == [10.0, 11.0, 14.0, 12.0, 11.0]
    row = cell_metrics(data).set_index("cell_id").loc["p"]
    ratio, jps = np.median([2.0, 2.75]), np.median([11.0, 11.5])
    assert (row["energy_ratio"], row["joules_per_step"], row["energy_method"]) == (ratio, jps, "paired")
    assert row["energy_ratio_low"] <= ratio <= row["energy_ratio_high"] and row["energy_ratio_high"] <= 3
    eager_jps = jps * ratio
    assert row["energy_break_even_steps"] == pytest.approx(500 / (eager_jps - jps))
    assert row["energy_break_even_j"] == pytest.approx(500 / (eager_jps - jps) * eager_jps)


def test_paired_intervals_hold_the_true_ratio(tmp_path: Path) -> None:
    """40 paired cells whose blocks' J/step scatter 5% (lognormal) around 20 J eager and 12.5 J
    compiled: the 95% intervals of the ratio (1.6) and of the J/step hold them for nearly all."""
    rng = np.random.default_rng(7)
    times = ([10.0] * 3, [6.0] * 3)
    for cell in range(40):
        joules = [[tuple(rng.lognormal(np.log([20.0, 12.5]), 0.05)) for _ in range(6)] for _ in range(2)]
        write_paired_replicates(tmp_path, f"p{cell}", "inductor", [[times] * 6] * 2, block_j_per_step=joules,
                                **GPT2)  # fmt: skip
    metrics = cell_metrics(load_sweep(tmp_path, warn=None))
    ratio_held = (metrics["energy_ratio_low"] <= 1.6) & (1.6 <= metrics["energy_ratio_high"])
    jps_held = (metrics["joules_per_step_low"] <= 12.5) & (12.5 <= metrics["joules_per_step_high"])
    assert ratio_held.sum() >= 34 and jps_held.sum() >= 34  # 95% intervals: 38 of 40 expected
    assert ((metrics["energy_ratio_high"] - metrics["energy_ratio_low"]) < 0.3).all()  # and not vacuous


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
    assert analysis.metrics["joules_per_step"].isna().all()
    records = json.loads(render_tables(analysis, "json"))
    assert all(record["joules_per_step"] is None for record in records)
    for fmt in ("markdown", "latex", "csv"):
        assert render_tables(analysis, fmt)
    index = write_report(analysis, with_plots=True)
    assert "Energy per step" not in index.read_text()
