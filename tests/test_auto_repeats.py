"""`repeats=auto`: replicates round after round until each cell's speedup is decided, precise enough,
or `max_repeats` is reached; the stop rule on hand-made intervals and its agreement with `analyze`'s
verdict, the config's checks and old keys, and real sweeps here and on the local Slurm that record
why each cell stopped."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from analysis.statistics.decision import (
    COMPARED_STOPPED,
    FASTER,
    MAX_REACHED,
    MIN_REPLICATES,
    NO_DIFFERENCE,
    NO_SPEEDUP,
    PRECISE,
    SLOWER,
    Standing,
    spent_level,
    stop_reasons,
)
from analysis.statistics.verdicts import verdicts
from orchestrator.grid.expand import GridError, expand
from orchestrator.grid.files import read_grid
from tests.helpers import TINY, cli, slurm_cli, table
from tests.slurm.cluster import LocalSlurm
from workloads.contract.vocabulary import EQUIVALENCE


def compiled(speedup: tuple[float, float, float], replicates: int = 3, **settings) -> Standing:
    """An unpaired compiled cell compared with the eager cell `eager`, at max_repeats 5."""
    return Standing("compiled", replicates, 5, speedup=speedup, baseline="eager", **settings)


def reason(standing: Standing) -> str | None:
    return stop_reasons([standing])[standing.cell_id]


@pytest.mark.parametrize(
    "speedup, settings, expected",
    [
        ((1.30, 1.20, 1.40), {"equivalence": 0.05}, FASTER),  # above 1 + margin
        ((0.80, 0.70, 0.90), {"equivalence": 0.05}, SLOWER),  # below 1 - margin
        ((1.00, 0.99, 1.01), {"equivalence": 0.02}, NO_DIFFERENCE),  # within 1 ± margin
        ((1.03, 1.01, 1.05), {"equivalence": 0.02}, FASTER),  # above 1, not within: analyze says faster
        ((1.01, 0.99, 1.05), {"equivalence": 0.02}, None),  # holds 1, not within 1.02: measure more
        ((1.01, 0.99, 1.05), {"equivalence": 0.02, "rel_ci": 0.05}, PRECISE),  # ±0.03 ≤ 5% of 1.01
        ((1.01, 0.99, 1.05), {"equivalence": 0.02, "rel_ci": 0.01}, None),
        ((1.02, 1.01, 1.05), {"equivalence": 0.0}, FASTER),  # no margin: an interval above 1 decides
        ((1.01, 0.99, 1.02), {}, NO_DIFFERENCE),  # the default margin: 1 ± 2%
    ],
)
def test_a_compared_cell_stops_once_its_interval_decides_or_is_precise(
    speedup: tuple[float, float, float], settings: dict, expected: str | None
) -> None:
    assert reason(compiled(speedup, **settings)) == expected


def test_the_stop_reason_is_the_verdict_analyze_prints_on_a_grid_of_intervals_and_margins() -> None:
    ends = np.round(np.arange(0.90, 1.105, 0.01), 2)
    intervals = [(low, high) for low in ends for high in ends if low <= high]
    for margin in (0.0, 0.01, 0.02, 0.05, 0.1):
        cells = pd.DataFrame(
            {
                "data_wait_share": 0.0,
                "status": "completed",
                **{f"{kind}speedup_low": [low for low, _ in intervals] for kind in ("", "e2e_")},
                **{f"{kind}speedup_high": [high for _, high in intervals] for kind in ("", "e2e_")},
            }
        )
        verdicts(cells, np.ones(len(cells), bool), np.full(len(cells), -1), 0.1, margin)
        for (low, high), verdict in zip(intervals, cells["verdict"]):
            standing = Standing("c", 3, 10, margin, speedup=((low + high) / 2, low, high))
            expected = None if verdict == "undecided" else f"decided: {verdict}"
            assert reason(standing) == expected, (low, high, margin, verdict)


def test_no_cell_stops_before_three_replicates_and_every_cell_at_max_repeats() -> None:
    assert reason(compiled((1.5, 1.4, 1.6), replicates=1)) is None  # one run cannot see how runs differ
    assert reason(compiled((1.5, 1.4, 1.6), replicates=2)) is None  # two runs' t interval is too wide
    assert reason(compiled((1.03, 0.9, 1.2), replicates=4)) is None
    assert reason(compiled((1.03, 0.9, 1.2), replicates=5)) == MAX_REACHED
    assert reason(compiled((1.5, 1.4, 1.6), replicates=5)) == FASTER  # what decided it, not the count


def test_the_eager_cell_runs_while_an_unpaired_cell_compared_with_it_runs() -> None:
    eager = Standing("eager", 3, 5)
    going, decided = compiled((1.03, 0.9, 1.2)), compiled((1.5, 1.4, 1.6))
    assert stop_reasons([eager, going]) == {"eager": None, "compiled": None}
    assert stop_reasons([eager, decided]) == {"eager": COMPARED_STOPPED, "compiled": FASTER}
    # A paired cell measures its own eager side: it keeps no eager cell going.
    paired = Standing("paired", 3, 5, speedup=(1.03, 0.9, 1.2))
    assert stop_reasons([eager, paired]) == {"eager": NO_SPEEDUP, "paired": None}
    # Nor can a dependent keep it past its own max_repeats, or before three replicates let it stop.
    assert stop_reasons([Standing("eager", 5, 5), going])["eager"] == MAX_REACHED
    assert stop_reasons([Standing("eager", 2, 5), decided])["eager"] is None


def test_auto_repeats_keep_the_cell_ids_and_bad_values_are_one_line() -> None:
    grid = ["model=gpt", "backend=eager,inductor"]
    once = [c.cell_id for c in expand(grid).cells]
    auto = expand([*grid, "repeats=auto", "max_repeats=4", "equivalence=0.02"])
    assert [c.cell_id for c in auto.cells] == once
    assert all(c.auto and c.repeats == 4 for c in auto.cells)
    assert [repeat for _, repeat in auto.replicates()] == [0, 0]  # the later rounds are decided as they go
    for override, message in [
        ("repeats=sometimes", "repeats must be a positive integer or auto, got 'sometimes'"),
        ("max_repeats=2", "max_repeats must be >= 3"),
        ("equivalence=1.5", "equivalence must be in [0, 1)"),
        ("measure.max_repeats=4", "measure.max_repeats is now max_repeats"),
        ("+measure.equivalence=0.02", "measure.equivalence is now equivalence"),
    ]:
        with pytest.raises(GridError, match=re.escape(message)) as info:
            expand([*grid, "repeats=auto", override])
        assert "\n" not in str(info.value)


def test_a_config_yaml_written_before_the_keys_moved_is_read_as_the_new_keys(tmp_path: Path) -> None:
    from workloads.cell.config_io import load_cell_config
    from workloads.contract.sweep_dir import config_path

    grid = expand(["model=gpt", "repeats=auto", "max_repeats=4", f"hydra.sweep.dir={tmp_path}"])
    (cell,) = grid.cells
    old = {**cell.config, "measure": {**cell.config["measure"], "max_repeats": 3, "equivalence": 0.05}}
    del old["max_repeats"], old["equivalence"]
    path = config_path(tmp_path, cell.cell_id)
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(old))
    (read,) = read_grid(tmp_path).cells
    assert (read.repeats, read.config["equivalence"], read.cell_id) == (3, 0.05, cell.cell_id)
    loaded = load_cell_config(path)
    assert (loaded.most_repeats, loaded.equivalence) == (3, 0.05)


def test_slurm_needs_wait_for_auto_and_the_dry_run_says_auto(
    no_slurm_here: None, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from orchestrator.cli.main import main

    args = [
        "sweep",
        "cluster=test_slurm",
        *TINY,
        "repeats=auto",
        "max_repeats=4",
        "hydra.sweep.dir=sw",
    ]
    assert main([*args, "--dry-run"]) == 0
    assert "1 cell(s), repeats: auto (≤ 4): 1 in 1 job array(s)" in capsys.readouterr().out
    assert main(args) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "repeats=auto decides between rounds" in error and "--wait" in error
    assert not (tmp_path / "sw" / "manifest.parquet").exists()


def stop_records(sweep: Path) -> dict[str, dict]:
    return {
        d.name: json.loads((d / "auto_repeats.json").read_text()) for d in sorted((sweep / "cells").iterdir())
    }


def completed_runs(sweep: Path) -> dict[str, int]:
    return {
        d.name: int((pd.read_parquet(d / "run.parquet")["status"] == "completed").sum())
        for d in sorted((sweep / "cells").iterdir())
    }


def test_a_local_sweep_runs_rounds_until_each_cell_stops(tmp_path: Path) -> None:
    """Eager against aot_eager at the default margin (±2%), up to 4 rounds: no cell stops before its
    third run, the eager cell runs as long as its compiled cell, and `analyze` prints, at the level the
    stop rule spent at that run, the verdict the sweep stopped on (undecided where max_repeats ended
    it)."""
    sweep = tmp_path / "sw"
    args = [
        "sweep", *TINY, "steps=20", "backend=eager,aot_eager", "measure.paired=false", "repeats=auto",
        "max_repeats=4", f"hydra.sweep.dir={sweep}",
    ]  # fmt: skip
    dry = cli(tmp_path, *args, "--dry-run")
    assert dry.returncode == 0 and "2 cell(s) for " in dry.stdout and "repeats: auto (≤ 4)" in dry.stdout

    done = cli(tmp_path, *args)
    assert done.returncode == 0, done.stderr
    records, runs = stop_records(sweep), completed_runs(sweep)
    by_backend = {
        row["backend"]: row["cell_id"] for _, row in pd.read_parquet(sweep / "manifest.parquet").iterrows()
    }
    eager, aot = records[by_backend["eager"]], records[by_backend["aot_eager"]]
    assert aot["replicates"] in {MIN_REPLICATES, 4} and aot["reason"] != PRECISE  # no rel_ci set
    assert aot["replicates"] == 4 or aot["reason"] in {FASTER, SLOWER, NO_DIFFERENCE}
    assert eager["replicates"] == aot["replicates"]  # the eager cell ran as long as its compiled cell
    assert eager["reason"] in {COMPARED_STOPPED, MAX_REACHED}
    assert {cell: record["replicates"] for cell, record in records.items()} == runs
    assert re.findall(r"^round (\d)", done.stdout, re.M) == [str(r + 1) for r in range(aot["replicates"])]
    for record in records.values():
        assert re.search(rf"\| {record['replicates']}\s+\| {record['reason']}\s+\|", done.stdout)

    status = cli(tmp_path, "status", str(sweep))
    assert status.returncode == 0, status.stdout
    for cell_id, row in table(status.stdout).items():
        assert row["state"] == "completed"
        assert row["repeats"] == f"{records[cell_id]['replicates']}, {records[cell_id]['reason']}"
    analysed = cli(tmp_path, "analyze", str(sweep), "--no-plots", "--full", "--format", "csv")
    assert analysed.returncode == 0, analysed.stderr
    row = pd.read_csv(io.StringIO(analysed.stdout)).set_index("cell_id").loc[by_backend["aot_eager"]]
    decided = aot["reason"].removeprefix("decided: ") if aot["reason"] != MAX_REACHED else "undecided"
    assert row["verdict"] == decided and aot["equivalence"] == EQUIVALENCE
    level = spent_level(aot["replicates"], 4)
    assert row["interval_level"] == pytest.approx(level) and level > 0.95
    assert (row["speedup_low"], row["speedup_high"]) == (
        pytest.approx(aot["low"]),
        pytest.approx(aot["high"]),
    )
    text = cli(tmp_path, "analyze", str(sweep), "--no-plots", "--full").stdout
    assert "### repeats=auto: why each cell stopped" in text and "within ±2.0% of 1" in text
    assert f"across {aot['replicates']} runs, {100 * level:.2f}".rstrip("0") in text
    narrow = cli(tmp_path, "analyze", str(sweep), "--no-plots", "--equivalence", "0.01")
    assert "within ±1.0% of 1" in narrow.stdout and "within ±2.0%" not in narrow.stdout

    again = cli(tmp_path, *args)  # stopped cells are not run again
    assert again.returncode == 0 and "0 completed, 2 already completed" in again.stdout, again.stdout
    assert completed_runs(sweep) == runs


def test_slurm_submits_round_after_round_with_wait(slurm_cluster: LocalSlurm, tmp_path: Path) -> None:
    args = [
        "sweep", "cluster=test_slurm", *TINY, "backend=eager,aot_eager", "measure.paired=false",
        "repeats=auto", "max_repeats=3", "hydra.sweep.dir=sw", "--wait", "--poll", "1",
    ]  # fmt: skip
    done = slurm_cli(slurm_cluster, tmp_path, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.findall(r"^round (\d)", done.stdout, re.M) == ["1", "2", "3"]
    assert len(re.findall(r"^submitted ", done.stdout, re.M)) == 3  # one array per round
    records = stop_records(tmp_path / "sw")
    assert {record["replicates"] for record in records.values()} == {3}  # max_repeats = the fewest
    assert completed_runs(tmp_path / "sw") == {cell: 3 for cell in records}
