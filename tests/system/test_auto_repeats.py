"""`repeats=auto`: replicates round after round until each cell's speedup is decided, precise enough,
or `max_repeats` is reached; the stop rule on hand-made intervals and its agreement with `analyze`'s
verdict, the config's checks and old keys, and real sweeps here and on the local Slurm that record
why each cell stopped."""

from __future__ import annotations

import io
import itertools
import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from analysis import sweep_frames
from analysis.reading.axes import cell_labels
from analysis.rendering.text import fmt_speedup
from analysis.report import analyze
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
from analysis.statistics.verdicts import equivalence_verdict, verdicts
from orchestrator.grid.expand import GridError, expand
from orchestrator.grid.files import read_grid
from orchestrator.sweep.tables import closing_tables
from tests.helpers import TINY, cli, slurm_cli, table
from tests.helpers.analysis_sweeps import write_replicates
from tests.helpers.slurm.cluster import LocalSlurm
from workloads.contract.sweep_dir import write_auto_stop
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
    """Also with a run apart: the verdict is undecided and the cell goes on."""
    ends = np.round(np.arange(0.90, 1.105, 0.01), 2)
    intervals = [(low, high) for low in ends for high in ends if low <= high]
    for margin, apart in itertools.product(
        (0.0, 0.01, 0.02, 0.05, 0.1), (None, "run 4 is 9% above the others")
    ):
        cells = pd.DataFrame(
            {
                "data_wait_share": 0.0,
                "status": "completed",
                "runs_apart": apart,
                **{f"{kind}speedup_low": [low for low, _ in intervals] for kind in ("", "e2e_")},
                **{f"{kind}speedup_high": [high for _, high in intervals] for kind in ("", "e2e_")},
            }
        )
        verdicts(cells, np.ones(len(cells), bool), np.full(len(cells), -1), 0.1, margin)
        assert apart is None or set(cells["verdict"]) == {"undecided"}
        for (low, high), verdict in zip(intervals, cells["verdict"]):
            standing = Standing("c", 3, 10, margin, speedup=((low + high) / 2, low, high), apart=apart)
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


#: The margin of the shared sweep: not the default, so that a table drawn with the default shows.
MARGIN = 0.05
#: pytest-timeout for the tests of the shared sweep (its 12 processes took 9 min on the 2-core machine
#: at load average 11-14, past the suite's 600 s; the old 2-cell sweep took 3.6 min at load 4-10).
SHARED_SWEEP_TIMEOUT_S = 1800


@dataclass
class AutoSweep:
    """One real local repeats=auto sweep, shared by the tests below: eager and two compiled cells of one
    workload, unpaired (both compared with the one eager cell), at margin MARGIN, up to 4 rounds."""

    cwd: Path
    sweep: Path
    args: list[str]
    dry: subprocess.CompletedProcess
    done: subprocess.CompletedProcess

    def backends(self) -> dict[str, str]:
        manifest = pd.read_parquet(self.sweep / "manifest.parquet")
        return dict(zip(manifest["backend"], manifest["cell_id"]))


@pytest.fixture(scope="module")
def auto_sweep(tmp_path_factory: pytest.TempPathFactory) -> AutoSweep:
    cwd = tmp_path_factory.mktemp("auto")
    sweep = cwd / "sw"
    args = [
        "sweep", *TINY, "steps=20", "backend=eager,aot_eager,torchscript", "measure.paired=false",
        "repeats=auto", "max_repeats=4", f"equivalence={MARGIN}", f"hydra.sweep.dir={sweep}",
    ]  # fmt: skip
    dry = cli(cwd, *args, "--dry-run")
    return AutoSweep(cwd, sweep, args, dry, cli(cwd, *args, timeout=1800))


@pytest.mark.timeout(SHARED_SWEEP_TIMEOUT_S)
def test_a_local_sweep_runs_rounds_until_each_cell_stops(auto_sweep: AutoSweep) -> None:
    """No cell stops before its third run, the eager cell runs as long as its compiled cells, and
    `analyze` prints, at the level the stop rule spent at that run and with the sweep's margin, the
    verdict the sweep stopped on (undecided where max_repeats ended it); a sweep run again runs
    nothing."""
    sweep, tmp_path, args, done = auto_sweep.sweep, auto_sweep.cwd, auto_sweep.args, auto_sweep.done
    dry = auto_sweep.dry
    assert dry.returncode == 0 and "3 cell(s) for " in dry.stdout and "repeats: auto (≤ 4)" in dry.stdout
    assert done.returncode == 0, done.stderr
    records, runs = stop_records(sweep), completed_runs(sweep)
    by_backend = auto_sweep.backends()
    eager = records[by_backend["eager"]]
    compiled = [records[by_backend[backend]] for backend in ("aot_eager", "torchscript")]
    for record in compiled:
        assert record["replicates"] in {MIN_REPLICATES, 4} and record["reason"] != PRECISE  # no rel_ci set
        assert record["replicates"] == 4 or record["reason"] in {FASTER, SLOWER, NO_DIFFERENCE}
    most = max(record["replicates"] for record in compiled)
    assert eager["replicates"] == most  # the eager cell ran as long as its longest compiled cell
    assert eager["reason"] in {COMPARED_STOPPED, MAX_REACHED}
    assert {cell: record["replicates"] for cell, record in records.items()} == runs
    assert re.findall(r"^round (\d)", done.stdout, re.M) == [str(r + 1) for r in range(most)]
    for record in records.values():
        assert re.search(rf"\| {record['replicates']}\s+\| {record['reason']}\s+\|", done.stdout)

    status = cli(tmp_path, "status", str(sweep))
    assert status.returncode == 0, status.stdout
    for cell_id, row in table(status.stdout).items():
        assert row["state"] == "completed"
        assert row["repeats"] == f"{records[cell_id]['replicates']}, {records[cell_id]['reason']}"
    analysed = cli(tmp_path, "analyze", str(sweep), "--no-plots", "--full", "--format", "csv")
    assert analysed.returncode == 0, analysed.stderr
    rows = pd.read_csv(io.StringIO(analysed.stdout)).set_index("cell_id")
    for backend in ("aot_eager", "torchscript"):
        record, row = records[by_backend[backend]], rows.loc[by_backend[backend]]
        decided = (
            record["reason"].removeprefix("decided: ") if record["reason"] != MAX_REACHED else "undecided"
        )
        assert row["verdict"] == decided and record["equivalence"] == MARGIN
        level = spent_level(record["replicates"], 4)
        assert row["interval_level"] == pytest.approx(level) and level > 0.95
        assert (row["speedup_low"], row["speedup_high"]) == (
            pytest.approx(record["low"]),
            pytest.approx(record["high"]),
        )
    text = cli(tmp_path, "analyze", str(sweep), "--no-plots", "--full").stdout
    assert "### repeats=auto: why each cell stopped" in text and "within ±5.0% of 1" in text
    assert "within ±2.0%" not in text  # the recorded margin, not the default
    level = spent_level(compiled[0]["replicates"], 4)
    assert f"across {compiled[0]['replicates']} runs, {100 * level:.2f}".rstrip("0") in text
    narrow = cli(tmp_path, "analyze", str(sweep), "--no-plots", "--equivalence", "0.01")
    assert "within ±1.0% of 1" in narrow.stdout and "within ±5.0%" not in narrow.stdout

    again = cli(tmp_path, *args)  # stopped cells are not run again
    assert again.returncode == 0 and "0 completed, 3 already completed" in again.stdout, again.stdout
    assert completed_runs(sweep) == runs


def closing_table(stdout: str) -> dict[str, dict[str, str]]:
    """The per-cell table a sweep prints at its end, by its `cell` label."""
    lines = ("| cell " + stdout.split("\n\n| cell ", 1)[1].split("\n\n", 1)[0]).splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [dict(zip(header, (c.strip() for c in line.strip("|").split("|")))) for line in lines[2:]]
    return {row["cell"]: row for row in rows}


@pytest.mark.timeout(SHARED_SWEEP_TIMEOUT_S)
def test_every_door_of_a_repeats_auto_sweep_agrees_cell_by_cell(auto_sweep: AutoSweep) -> None:
    """The stop table (each cell's record), the table the sweep printed at its end, `analyze`,
    `sweep_frames` and `status` give each cell the same replicates, speedup, interval and verdict:
    the verdict its stop rule decided with the sweep's margin (±5%), not the default's."""
    sweep, done = auto_sweep.sweep, auto_sweep.done
    assert done.returncode == 0, done.stderr
    records = stop_records(sweep)
    frames = sweep_frames(sweep, warn=None).cells.set_index("cell_id", drop=False)
    analysed = cli(auto_sweep.cwd, "analyze", str(sweep), "--no-plots", "--full", "--format", "csv")
    rows = pd.read_csv(io.StringIO(analysed.stdout)).set_index("cell_id")
    closing = closing_table(done.stdout)
    status = table(cli(auto_sweep.cwd, "status", str(sweep)).stdout)
    labels = dict(zip(frames["cell_id"], cell_labels(frames)))
    assert "within ±5.0% of 1" in done.stdout and "within ±2.0%" not in done.stdout  # the closing note
    for cell_id, record in records.items():
        frame, row, printed = frames.loc[cell_id], rows.loc[cell_id], closing[labels[cell_id]]
        replicates = record["replicates"]
        assert frame["replicates"] == row["replicates"] == replicates, cell_id
        assert status[cell_id]["repeats"].startswith(f"{replicates}, ")
        assert re.search(rf"\| {cell_id}\s+\| {replicates}\s+\| {record['reason']}\s+\|", done.stdout)
        if frame["backend"] == "eager":
            assert pd.isna(frame["verdict"]) and pd.isna(row["verdict"]) and printed["verdict"] == "baseline"
            continue
        interval = (record["speedup"], record["low"], record["high"])
        for side in (frame, row):
            assert (side["speedup"], side["speedup_low"], side["speedup_high"]) == pytest.approx(interval)
        assert printed["speedup [95% CI]"] == fmt_speedup(*interval)
        (at_margin,) = equivalence_verdict(np.array([record["low"]]), np.array([record["high"]]), MARGIN)
        decided = (
            record["reason"].removeprefix("decided: ") if record["reason"] != MAX_REACHED else "undecided"
        )
        assert frame["verdict"] == row["verdict"] == printed["verdict"] == decided == at_margin, cell_id


def test_the_margin_the_cells_decide_with_is_every_tables_margin(tmp_path: Path) -> None:
    """Two repeats=auto cells written by hand whose speedup's interval lies within ±5% of 1 and not
    within ±2%: with the cells' margin 5% (their config.yaml, before any stop record, as the stop rule
    reads them; then their records) `sweep_frames`, `analyze` and the sweep's closing table say `no
    difference`; the default margin would say `undecided`."""
    steps = lambda median: [median * 0.99, median, median * 1.01] * 7  # noqa: E731
    for cell_id, backend, medians in (
        ("e", "eager", (10.0, 10.1, 9.9)),
        ("i", "inductor", (9.9, 10.1, 10.0)),
    ):
        directory = write_replicates(tmp_path, cell_id, backend, [steps(m) for m in medians])
        config = yaml.safe_load((directory / "config.yaml").read_text())
        config.update(repeats="auto", max_repeats=4, equivalence=MARGIN)
        (directory / "config.yaml").write_text(yaml.safe_dump(config))
    default = sweep_frames(tmp_path, equivalence=EQUIVALENCE, warn=None).cells.set_index("cell_id")
    assert default.loc["i", "verdict"] == "undecided"  # the data tell the two margins apart
    for stage in ("going", "stopped"):
        assert (
            sweep_frames(tmp_path, warn=None).cells.set_index("cell_id").loc["i", "verdict"]
            == "no difference"
        )
        assert (
            analyze(tmp_path, warn=None).metrics.set_index("cell_id").loc["i", "verdict"] == "no difference"
        )
        closing = closing_tables(tmp_path, ["e", "i"], per_cell=True, auto=False)
        assert "| no difference " in closing and "within ±5.0% of 1" in closing, stage
        for cell_id in ("e", "i"):
            record = {"replicates": 3, "reason": MAX_REACHED, "equivalence": MARGIN}
            write_auto_stop(tmp_path / "cells" / cell_id, record)


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
