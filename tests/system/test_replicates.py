"""Replicates (`repeats=N`): each its own process (locally) or array task (Slurm), the backends of
a workload alternating, each attempt's run row carrying its `repeat`; one cell in every table."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pandas as pd

from orchestrator.executors.local import run_replicates
from orchestrator.grid.expand import expand
from orchestrator.grid.files import prepare
from tests.helpers import TINY, cli, slurm_cli, table, wait_until, wait_until_done
from tests.helpers.slurm.cluster import LocalSlurm


def test_replicates_alternate_backends_and_their_order_and_keep_the_cell_ids() -> None:
    grid = ["model=gpt", "size=tiny,small", "backend=eager,inductor"]
    once, thrice = expand(grid), expand([*grid, "repeats=3"])
    assert [c.cell_id for c in thrice.cells] == [c.cell_id for c in once.cells]  # more runs, the same cells
    order = [(cell.axes["size"], cell.axes["backend"], repeat) for cell, repeat in thrice.replicates()]
    assert [repeat for *_, repeat in order] == [0] * 4 + [1] * 4 + [2] * 4  # every cell once, then again
    # Eager first in odd rounds, compiled first in even ones: a drift lags each side every other round.
    for size in ("tiny", "small"):
        assert [(backend, repeat) for s, backend, repeat in order if s == size] == [
            ("eager", 0),
            ("inductor", 0),
            ("inductor", 1),
            ("eager", 1),
            ("eager", 2),
            ("inductor", 2),
        ]


def _runs(sweep: Path) -> dict[str, pd.DataFrame]:
    return {d.name: pd.read_parquet(d / "run.parquet") for d in sorted((sweep / "cells").iterdir())}


def _process_starts(sweep: Path) -> dict[str, list[pd.Timestamp]]:
    """When each replicate's process started, per cell in replicate order, as its log says."""
    return {
        d.name: [
            pd.Timestamp(t)
            for t in re.findall(r"process started at (\S+),", (d / "logs" / "stderr.log").read_text())
        ]
        for d in (sweep / "cells").iterdir()
    }


def test_local_replicates_run_in_turn_and_more_runs_add_only_the_missing(tmp_path: Path) -> None:
    sweep = tmp_path / "sw"
    args = ["sweep", *TINY, "backend=eager", "seed=1,2", f"hydra.sweep.dir={sweep}"]
    first = cli(tmp_path, *args, "repeats=2")
    assert first.returncode == 0, first.stderr
    progress = re.findall(r"\[(\d)/4\] \S+ run (\d)/2 \((\w+)\)", first.stdout)
    assert [run for _, run, _ in progress] == ["1", "1", "2", "2"], (
        first.stdout
    )  # both cells, then both again
    for runs in _runs(sweep).values():
        assert list(runs["repeat"]) == [0, 1] and set(runs["status"]) == {"completed"}
    # One process on the device at a time, in the sweep's order; each next one started ahead,
    # while the one before it ran (workloads/local/turns.py), as its log says.
    runs = pd.concat(_runs(sweep).values()).sort_values("started_at")
    assert (runs["started_at"].iloc[1:].to_numpy() >= runs["finished_at"].iloc[:-1].to_numpy()).all()
    process_started = _process_starts(sweep)
    for previous, (_, row) in zip(runs.itertuples(), runs.iloc[1:].iterrows()):
        assert process_started[row["cell_id"]][row["repeat"]] < previous.finished_at, process_started

    more = cli(tmp_path, *args, "repeats=3")  # the same cells: only their third run is new
    assert more.returncode == 0, more.stderr
    skipped = [line for line in more.stdout.splitlines() if line.endswith("... already completed")]
    assert len(skipped) == 4 and "2 completed, 4 already completed" in more.stdout, more.stdout
    assert {tuple(runs["repeat"]) for runs in _runs(sweep).values()} == {(0, 1, 2)}

    status = cli(tmp_path, "status", str(sweep))
    assert status.returncode == 0, status.stdout
    assert {(row["state"], row["attempts"]) for row in table(status.stdout).values()} == {("completed", "3")}
    analysed = cli(tmp_path, "analyze", str(sweep), "--format", "csv", "--no-plots")
    cells = pd.read_csv(io.StringIO(analysed.stdout))
    assert len(cells) == 2 and list(cells["replicates"]) == [3, 3]  # replicates of one cell, not cells


def test_replicates_started_ahead_in_a_batch_still_take_the_device_one_at_a_time(tmp_path: Path) -> None:
    grid = expand([*TINY, "backend=eager", "seed=1,2", "repeats=2", f"hydra.sweep.dir={tmp_path / 'sw'}"])
    prepare(grid)
    progress = io.StringIO()
    outcomes = run_replicates(
        grid.sweep_dir, grid.replicates(), grid.cluster["compile_cache"], progress, ahead=3
    )
    assert [o.status for o in outcomes] == ["completed"] * 4, progress.getvalue()
    runs = pd.concat(_runs(grid.sweep_dir).values()).sort_values("started_at")
    assert (runs["started_at"].iloc[1:].to_numpy() >= runs["finished_at"].iloc[:-1].to_numpy()).all()
    process_started = _process_starts(grid.sweep_dir)
    first = runs.iloc[0]
    for _, row in runs.iloc[1:].iterrows():  # the other three were started while the first ran
        assert process_started[row["cell_id"]][row["repeat"]] < first["finished_at"], process_started


def test_replicates_are_array_tasks_in_alternating_order(slurm_cluster: LocalSlurm, tmp_path: Path) -> None:
    sweep = tmp_path / "sw"
    args = [
        "sweep",
        "cluster=test_slurm",
        *TINY,
        "backend=eager,aot_eager",
        "repeats=2",
        "hydra.sweep.dir=sw",
    ]
    submitted = slurm_cli(slurm_cluster, tmp_path, *args)
    assert submitted.returncode == 0, submitted.stderr
    manifest = pd.read_parquet(sweep / "manifest.parquet").set_index("cell_id")
    jobs = {cell: ids.split() for cell, ids in manifest["job_id"].items()}  # one job per replicate
    array = {job.split("_")[0] for ids in jobs.values() for job in ids}
    assert len(array) == 1 and sorted(job for ids in jobs.values() for job in ids) == [
        f"{next(iter(array))}_{task}" for task in range(4)
    ]
    eager = manifest.index[manifest["backend"] == "eager"][0]
    compiled = manifest.index[manifest["backend"] == "aot_eager"][0]
    task = lambda job: int(job.split("_")[1])  # noqa: E731
    # Task order is run order: eager first in round 1, compiled first in round 2 (Grid.round_order).
    assert [task(j) for j in jobs[eager]] == [0, 3] and [task(j) for j in jobs[compiled]] == [1, 2]

    cell_dirs = [sweep / "cells" / cell for cell in manifest.index]
    wait_until_done(slurm_cluster, {job for ids in jobs.values() for job in ids}, cell_dirs)

    def replicates_done() -> bool:
        return all(len(pd.read_parquet(d / "run.parquet")) == 2 for d in cell_dirs)

    # The queue may empty a moment before the second replicate's row is renamed into place.
    wait_until(replicates_done, 60, lambda _: f"runs: {_runs(sweep)}", done=bool, interval=0.5)
    for cell, runs in _runs(sweep).items():
        assert list(runs.sort_values("repeat")["repeat"]) == [0, 1] and set(runs["status"]) == {"completed"}
        ran_as = {int(t) for t in runs["slurm_array_task_id"]}
        assert ran_as == {task(j) for j in jobs[cell]}  # replicate r of the cell ran as its own array task
    status = slurm_cli(slurm_cluster, tmp_path, "status", "sw")
    assert status.returncode == 0 and "2 cell(s): 2 completed" in status.stdout, status.stdout
